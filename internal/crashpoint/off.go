//go:build !crashpoints

// Package crashpoint: production builds compile every crash point to nothing.
package crashpoint

// Enabled reports whether crash points are compiled in.
const Enabled = false

// Hit is a no-op without the crashpoints build tag.
func Hit(string) {}
