// Package clientsys lets a process that runs an actor remote of its own
// (a coordinator, a test with its own remote) give it to the clients it
// starts, without an actor type in package client's API: the system rides
// in the context passed to client.Client.Start (or client.Dial), which
// reads it once. A client started so uses that system instead of the
// process's shared remote and does not stop it; TLS then secures only its
// NATS connection.
//
// Concurrency: the functions are safe for concurrent use; the context
// holds no state of its own.
package clientsys

import (
	"context"

	"github.com/asynkron/protoactor-go/actor"
)

type systemKey struct{}

// WithSystem returns ctx carrying sys, an actor system with remote
// already started, for the clients started with it. A nil sys carries
// none.
func WithSystem(ctx context.Context, sys *actor.ActorSystem) context.Context {
	if sys == nil {
		return ctx
	}
	return context.WithValue(ctx, systemKey{}, sys)
}

// System is the actor system ctx carries, nil for none.
func System(ctx context.Context) *actor.ActorSystem {
	sys, _ := ctx.Value(systemKey{}).(*actor.ActorSystem)
	return sys
}
