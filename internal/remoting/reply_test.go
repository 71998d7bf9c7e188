package remoting

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/messages"
)

// TestReplyAnswerAtTheTimeout: answers reach a request's reply address
// as its wait times out, and a DeadLetterResponse after them, as a
// remote's reader delivers them (the process resolved before, the
// message handed to it on the reader's goroutine). Each wait returns the
// answer or actor.ErrTimeout, and the race detector finds nothing: with
// protoactor's future in place of the Reply, the answer's unlocked write
// races with the waiter's read of the result.
func TestReplyAnswerAtTheTimeout(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer sys.Shutdown()
	ctx := context.Background()
	var answered, timedOut int
	for i := range 500 {
		r := NewReply(sys)
		proc, ok := sys.ProcessRegistry.Get(r.PID())
		if !ok {
			t.Fatal("the reply address is not registered")
		}
		delivered := make(chan struct{})
		go func() {
			defer close(delivered)
			proc.SendUserMessage(r.PID(), &messages.Row{Key: []byte("answer")})
			proc.SendUserMessage(r.PID(), &actor.DeadLetterResponse{Target: r.PID()})
		}()
		res, err := r.Wait(ctx, time.Duration(i%50)*time.Microsecond+time.Microsecond)
		r.Close()
		<-delivered
		switch row, _ := res.(*messages.Row); {
		case err == nil && string(row.GetKey()) == "answer":
			answered++
		case errors.Is(err, actor.ErrTimeout) && res == nil:
			timedOut++
		default:
			t.Fatalf("round %d: got %v, %v; want the answer or actor.ErrTimeout", i, res, err)
		}
	}
	t.Logf("%d answered, %d timed out", answered, timedOut)
}

// TestReplyDeadLetterAndContext: a DeadLetterResponse as the first answer
// is actor.ErrDeadLetter; a wait without a timeout ends with its context.
func TestReplyDeadLetterAndContext(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer sys.Shutdown()
	r := NewReply(sys)
	sys.Root.Send(r.PID(), &actor.DeadLetterResponse{Target: r.PID()})
	if _, err := r.Wait(context.Background(), time.Minute); !errors.Is(err, actor.ErrDeadLetter) {
		t.Fatalf("after a DeadLetterResponse: %v, want actor.ErrDeadLetter", err)
	}
	r.Close()
	r = NewReply(sys)
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Wait(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("with its context cancelled: %v, want context.Canceled", err)
	}
}
