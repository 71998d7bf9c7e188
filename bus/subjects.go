package bus

import (
	"errors"
	"fmt"
	"strings"
)

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

// ErrSignalSubject is wrapped by CheckSignalSubject's error: a heartbeat,
// busy or timeout payload arrived on a subject other than the one its own
// host and server make.
var ErrSignalSubject = errors.New("bus: signal subject does not match its payload")

// CheckSignalSubject reports whether subject is the heartbeat, busy or
// timeout subject of host and server (the payload's): exactly
// <prefix>.Token(host).Token(server). The server's permissions bind a
// host's scan server certificate to the subjects of its host token
// (CertUser.Host), so a payload that passes this check on a subject that
// certificate may publish names that host: the certificate of h1 cannot
// announce a heartbeat of h2. Subscribers (SubscribeHeartbeats,
// SubscribeSignals) drop a payload that fails it. Token is lossy: hosts
// whose names differ only in characters outside [A-Za-z0-9_-] share a
// token, so the check binds a certificate to a token, not to one name.
func CheckSignalSubject(subject, host, server string) error {
	rest, ok := "", false
	for _, p := range []string{hbPrefix, busyPrefix, timeoutPrefix} {
		if rest, ok = strings.CutPrefix(subject, p); ok {
			break
		}
	}
	if !ok {
		return fmt.Errorf("%w: subject %q is not a heartbeat, busy or timeout subject", ErrSignalSubject, subject)
	}
	if want := Token(host) + "." + Token(server); rest != want {
		return fmt.Errorf("%w: subject %q, payload host %q server %q (want the subject's tail %q)", ErrSignalSubject, subject, host, server, want)
	}
	return nil
}
