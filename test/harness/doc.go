// Package harness is what every test suite on the local fleet starts from: a fleet started and
// seeded (Start), a running Registry (Env.Registry), convergence against what the API servers
// list through package verify (Converge), a handler that records each object's final state and
// every inconsistent event (FinalStates), the real multicache binary as a daemon (Daemon:
// this tree's, Binary, or another commit's, BinaryAt, started by StartBinaryAt), and small
// helpers (WaitFor, EnvInt).
package harness
