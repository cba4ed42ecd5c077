// Package doccheck holds no code: its test checks that every package of the repository says
// in its doc.go what it owns, file by file (doc_test.go).
package doccheck
