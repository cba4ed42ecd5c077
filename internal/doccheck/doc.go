// Package doccheck holds no code: its test checks that every package of the repository says
// in its doc.go what it owns, file by file (doc_test.go), and that the HTTP fronts write
// their errors in one function each and decode the Kubernetes API's options at one site each,
// as their doc.go files say (fronts_test.go).
package doccheck
