//go:build !crashpoints

// Production builds (no crashpoints tag) compile every crash point to nothing.

package crashpoint

// Enabled reports whether crash points are compiled in.
const Enabled = false

// Hit is a no-op without the crashpoints build tag.
func Hit(string) {}
