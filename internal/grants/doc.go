// Package grants owns who may scan what: a Grant names a principal and
// the tables (exact names or "prefix*" patterns) it may scan, or every
// table. A client certificate carries its grant as a URI subject
// alternative name, scanplane://principal/NAME?tables=T1,T2 (URI,
// FromCertificate); a certificate without one may scan every table. The
// remote Guard reads the grant of each secured peer, the coordinator asks
// Allows before it takes a scan request, and any other entry point (an
// API gateway) may ask the same. The package is pure: it reads values and
// starts nothing. A Grant is immutable and safe for concurrent use.
package grants
