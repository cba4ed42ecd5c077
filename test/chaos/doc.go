// Package chaos scripts faults against a local fleet while the cache runs, then checks it
// against ground truth (pkg/verify) and against what its handlers were told: every scenario
// records the time from recovery to convergence and the count of diverged objects, which must
// be 0. docs/RELIABILITY.md holds the figures.
package chaos
