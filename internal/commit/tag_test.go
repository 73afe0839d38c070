package commit

import (
	"strings"
	"testing"
)

func TestTags(t *testing.T) {
	tag := Tag("orders_eu", 1042, 3)
	if tag != "orders_eu-1042-3" {
		t.Fatal(tag)
	}
	c, s, ok := ParseTag("orders_eu", tag)
	if !ok || c != 1042 || s != 3 {
		t.Fatalf("ParseTag = %d %d %v", c, s, ok)
	}
	for _, other := range []string{"orders-1-0", "orders_eu-1-x", "orders_eu-01-0", "orders_eu_2-1-0", "orders_eu-1"} {
		if _, _, ok := ParseTag("orders_eu", other); ok {
			t.Errorf("ParseTag accepted %q", other)
		}
	}
	if n := len(MaxTag(strings.Repeat("a", 32), 256)); n > MaxTagBytes {
		t.Fatalf("longest tag %d bytes", n)
	}
}
