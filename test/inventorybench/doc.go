// Package inventorybench measures issue 35's I4 side by side in one run: the same Pods and the
// same inventory questions answered by multicache's aggregate in memory, by PostgreSQL with the
// objects as jsonb (OCM search's schema: resources(uid, cluster, data jsonb) with a GIN index),
// and by SQLite in Rancher Steve's layout (one table per kind, indexed field columns and a labels
// table; modernc.org/sqlite, as Steve uses). It is its own module so that the database drivers
// stay out of the library's dependencies; `make bench-inventory` runs it. PostgreSQL is Debian's
// (initdb and postgres on PATH), started by the benchmark on loopback in a temporary directory,
// stopped by its PID and removed.
package inventorybench
