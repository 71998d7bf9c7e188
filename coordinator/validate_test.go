package coordinator

import (
	"strings"
)

func Key(n int) []byte { return []byte(strings.Repeat("k", n)) }
