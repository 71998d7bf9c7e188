package bus

// InboxPrefix is the reply-inbox prefix of the NATS user whose
// certificate subject is subject (CertUser.Subject, as pkix.Name.String
// writes it): "_INBOX_" followed by Token(subject), e.g.
// "_INBOX_CN_scanplane_client_OU_client_O_scanplane" for the client
// certificate. A restricted user may subscribe to its own inbox subjects
// (InboxPrefix(subject)+".>") and to no other inbox, so the replies
// another user gets — a block a scan server reads, the consumer a
// coordinator creates, the deliveries of its watches — are out of its
// reach; the server refuses the subscription with a permissions
// violation. Connect gives a connection with a TLS certificate this
// prefix (nats.CustomInboxPrefix, which every inbox nats.go makes
// honours: request replies, JetStream API replies, the deliver subjects
// of ordered consumers, so of KV watches).
//
// The prefix is per user, that is per certificate subject: one per role,
// and one per host for the scan servers' host certificates. Every
// process holding one certificate shares its user and so its inbox
// (NATS permissions are per user, not per connection): two clients with
// client.crt can read each other's replies, which hold only what either
// may read itself. The subject, not the role, names the prefix so that
// two users of one role (two hosts' scan servers) do not share inboxes.
// Token is lossy (every character outside [A-Za-z0-9_-] becomes '_'):
// two subjects that differ only there share a prefix, which the
// subjects scanctl secrets init writes never do.
func InboxPrefix(subject string) string { return "_INBOX_" + Token(subject) }

// The subject prefixes the embedded server's permissions and accounts are
// built from (internal/natsserver). A signal's subject is its prefix
// followed by Token(host), ".", Token(server) (HeartbeatSubject); the KV
// bucket b is the JetStream stream KVStreamPrefix+b, whose keys are the
// subjects KVSubjectPrefix+b+".<key>".
const (
	HeartbeatPrefix = hbPrefix
	BusyPrefix      = busyPrefix
	TimeoutPrefix   = timeoutPrefix
	KVStreamPrefix  = kvStreamPrefix
	KVSubjectPrefix = kvSubjectPrefix
)
