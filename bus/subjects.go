package bus

import "strings"

// SubjectPrefix is the versioned root of every scanplane subject.
const SubjectPrefix = "scanplane.v1"

// MetaChangedSubject carries a TableMeta (without tablets) when a table's
// current generation changes.
const MetaChangedSubject = SubjectPrefix + ".meta.changed"

const (
	hbPrefix      = SubjectPrefix + ".hb."
	busyPrefix    = SubjectPrefix + ".busy."
	timeoutPrefix = SubjectPrefix + ".timeout."
)

// Token turns s into one safe subject token: every character outside
// [A-Za-z0-9_-] becomes '_' (so "127.0.0.1:8101/0" → "127_0_0_1_8101_0"),
// and an empty string becomes "_". Different inputs can map to the same
// token; subjects are for routing, the payload carries the exact ids.
func Token(s string) string {
	if s == "" {
		return "_"
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if isTokenRune(r) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func isTokenRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
}

// HeartbeatSubject is scanplane.v1.hb.<host>.<server>.
func HeartbeatSubject(host, server string) string {
	return hbPrefix + Token(host) + "." + Token(server)
}

// BusySubject is scanplane.v1.busy.<host>.<server>.
func BusySubject(host, server string) string {
	return busyPrefix + Token(host) + "." + Token(server)
}

// TimeoutSubject is scanplane.v1.timeout.<host>.<server>.
func TimeoutSubject(host, server string) string {
	return timeoutPrefix + Token(host) + "." + Token(server)
}
