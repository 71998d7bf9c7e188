package gateway

import (
	"context"
	"crypto/x509"
	"net/http"
	"strings"
)

// Principal is who made a request, as the HTTP endpoint authenticated it.
type Principal struct {
	// Name: the common name of the verified client certificate;
	// "bearer-token" for a request authenticated by the endpoint's bearer
	// token; "" on a plain (unsecured) endpoint.
	Name string
	// Roles: the certificate's roles (its subject's organizational
	// units: client, admin); empty without a certificate.
	Roles []string
	// Certificate: the verified client certificate, nil without one.
	Certificate *x509.Certificate
}

type principalKey struct{}

// PrincipalOf is the principal of the request ctx belongs to (a handler
// mounted by Server.Register); the zero Principal on a plain endpoint.
func PrincipalOf(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}

// withPrincipal puts the request's principal into its context: the leaf
// of the verified client certificate chain, else the bearer token's name
// when the request carries one (the endpoint checked it), else none.
func withPrincipal(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p Principal
		switch {
		case r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0:
			leaf := r.TLS.VerifiedChains[0][0]
			p = Principal{Name: leaf.Subject.CommonName, Roles: leaf.Subject.OrganizationalUnit, Certificate: leaf}
		case r.TLS != nil && bearer(r):
			p = Principal{Name: "bearer-token"}
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

func bearer(r *http.Request) bool {
	scheme, _, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return ok && strings.EqualFold(scheme, "Bearer")
}
