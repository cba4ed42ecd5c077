// Package config is the daemon's YAML configuration: its types, defaults and strict
// validation. Every error names the field at fault (`resources[2].indexes[0].cel: …`), and
// unknown fields are errors. Build turns a valid Config into clusterset.Options.
//
// Files: config.go (the types, defaults, validation, and what they build).
package config
