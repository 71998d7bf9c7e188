package selection

import (
	"math"
	"slices"
	"time"
)

// bookkeeperPolicy is BookKeeper's read reordering (PR 1504) with
// speculative reads (docs/policies.md, bookkeeper).
//
//   - Affinity order: the tablet's write set — the first writeSetSize
//     servers of its unsalted rendezvous order over the group's live
//     servers, one per host while distinct hosts remain (rack-aware, like a
//     BookKeeper ensemble); writeSetSize 0 = every server in rendezvous
//     order.
//   - pending[i] = pending() of replica i: max(InFlight, Active+QueueLen).
//     (BookKeeper counts only its own in-flight requests; scanplane also
//     sees the server's reported queue so that other coordinators' load
//     counts. "Channel not writable" has no equivalent: dead servers are
//     not candidates.)
//   - With T = reorderThresholdPendingRequests > 0: best = first index with
//     the strictly smallest pending; if best > 0 and pending[0] ≥
//     pending[best] + T, best moves to the front and the others keep their
//     order. Recomputed per call, so reads return to the first replica as
//     soon as its queue drains.
//   - With T = 0, slow replicas last: see healthOrder.
//   - The first replica in that order not yet tried in this scan is used;
//     when all were tried, the order starts over.
//   - Speculative reads (speculativeReadTimeout > 0): HedgeDelay =
//     DataTimeout = min(max, speculativeReadTimeout ×
//     speculativeBackoffMultiplier^k), k = hedges made in this scan counting
//     the one being decided; max = maxSpeculativeReadTimeout, or when that
//     is 0 (the default) speculativeReadTimeout itself, as in BookKeeper's
//     ClientConfiguration, so by default every speculative read waits the
//     same 2 s. A hedge call returns the next replica not yet
//     sent to, or ErrNoHedge when none remain. BookKeeper speculates only
//     while no replica has answered; for a scan the answer is its first
//     data, and the coordinator asks for a hedge only while no attempt has
//     delivered data, so an accepted (Started) attempt without data does not
//     stop a speculative read.
type bookkeeperPolicy struct{ p *Profile }

func (pol bookkeeperPolicy) Select(in *Input) (Decision, error) {
	var c call
	if err := c.begin(in, pol.p); err != nil {
		return Decision{}, err
	}
	o := &c.p.Options
	if in.Hedge && o.SpeculativeReadTimeout <= 0 {
		return Decision{}, ErrNoHedge
	}
	ws := c.writeSet(o.WriteSetSize)
	reorderPending(ws, func(i int32) int { return pending(c.g.alive[i]) }, o.ReorderThresholdPendingRequests)
	c.healthOrder(ws, o)
	choice := int32(-1)
	for _, i := range ws {
		if c.fresh(i) {
			choice = i
			break
		}
	}
	if choice < 0 {
		if in.Hedge {
			return Decision{}, ErrNoHedge
		}
		for _, i := range ws {
			if !c.flightAt(i) {
				choice = i
				break
			}
		}
		if choice < 0 {
			choice = ws[0]
		}
	}
	d := c.decisionA5(choice)
	d.Candidates = c.explain(ws)
	if o.SpeculativeReadTimeout > 0 {
		k := c.hedges
		if in.Hedge {
			k++
		}
		d.HedgeDelay = speculativeTimeout(o, k)
		d.DataTimeout = d.HedgeDelay
	}
	return d, nil
}

// reorderPending applies BookKeeper's move-to-front rule to order in place.
func reorderPending(order []int32, pend func(int32) int, threshold int) {
	if threshold <= 0 || len(order) < 2 {
		return
	}
	best, bp := 0, pend(order[0])
	first := bp
	for k := 1; k < len(order); k++ {
		if p := pend(order[k]); p < bp {
			best, bp = k, p
		}
	}
	if best > 0 && first >= bp+threshold {
		b := order[best]
		copy(order[1:best+1], order[:best])
		order[0] = b
	}
}

// healthOrder is the rest of BookKeeper's reorderReadSequence (rack-aware,
// not region-aware): when a replica of ws is slow, ws is stably reordered
// into healthy replicas (in their order), then replicas with a failure
// history (earliest last failure first), then slow replicas (fewest pending
// first, ties in write-set order). Unavailable replicas, BookKeeper's last
// class, are never in ws (dead servers are not candidates).
//
// What the load view has for BookKeeper's health info:
//   - slow: BookKeeper registers a bookie as slow when a speculative read
//     is sent because it did not answer in time (registerSlowBookie puts
//     it in slowBookies, a cache that expires an entry
//     bookieFailureHistoryExpirationMSec after its last write), so a
//     bookie is slow for exactly that long after its latest slowdown.
//     Here: the server's latest slowdown (one per hedge sent because it
//     gave no data in time; Slowdowns[DefaultDecay].Last) is less than
//     bookieFailureHistoryExpiration old; how many there were does not
//     matter. As in BookKeeper, slowness is used only when
//     reorderThresholdPendingRequests is 0 (with T > 0 BookKeeper never
//     registers slow bookies and relies on the pending reorder).
//   - failure history: BookKeeper's last failed entry id per bookie
//     (LedgerHandle.bookieFailureHistory, a cache with the same
//     expireAfterWrite). Here: the server's latest failure
//     (Errors[DefaultDecay].Last) is less than
//     bookieFailureHistoryExpiration old; ordered by LastFailure. A
//     failure resets the slowdowns, so a server that failed is in the
//     failure class, not the slow one (BookKeeper also puts a bookie with
//     a failure history there).
//
// As in BookKeeper, when no replica is slow (or unavailable) the order is
// left as it is, failure history included.
func (c *call) healthOrder(ws []int32, o *Options) {
	if o.ReorderThresholdPendingRequests > 0 || len(ws) < 2 {
		return
	}
	di := c.v.decayIndex(DefaultDecay)
	if di < 0 {
		return
	}
	const healthy, failed, slow = 0, 1, 2
	class := func(i int32) int {
		switch {
		case recent(c.g.errAt(di, int(i)).Last, c.now, bookieFailureHistoryExpiration):
			return failed
		case recent(c.g.slowAt(di, int(i)).Last, c.now, bookieFailureHistoryExpiration):
			return slow
		}
		return healthy
	}
	any := false
	for _, i := range ws {
		any = any || class(i) == slow
	}
	if !any {
		return
	}
	slices.SortStableFunc(ws, func(a, b int32) int {
		ca, cb := class(a), class(b)
		if ca != cb {
			return ca - cb
		}
		switch ca {
		case failed:
			return c.g.alive[a].LastFailure.Compare(c.g.alive[b].LastFailure)
		case slow:
			return pending(c.g.alive[a]) - pending(c.g.alive[b])
		}
		return 0
	})
}

// bookieFailureHistoryExpiration is how long a replica stays slow after
// its latest slowdown, and keeps a failure history after its latest
// failure: BookKeeper's bookieFailureHistoryExpirationMSec default, the
// expireAfterWrite of both its slowBookies and bookieFailureHistory.
const bookieFailureHistoryExpiration = 60 * time.Second

// recent reports whether the event at t (zero = none) is less than window
// old at now.
func recent(t, now time.Time, window time.Duration) bool {
	return !t.IsZero() && now.Sub(t) < window
}

// speculativeTimeout is min(max, timeout × multiplier^k); max 0 means
// max = timeout (BookKeeper's default maximum is the first timeout).
func speculativeTimeout(o *Options, k int) time.Duration {
	t := float64(o.SpeculativeReadTimeout) * math.Pow(math.Max(1, o.SpeculativeBackoffMultiplier), float64(k))
	limit := o.MaxSpeculativeReadTimeout
	if limit <= 0 {
		limit = o.SpeculativeReadTimeout
	}
	if t >= float64(limit) {
		return limit
	}
	return time.Duration(t)
}

// writeSet returns (in st.idx) the first size servers of the tablet's
// rendezvous order, one per host while distinct hosts remain, then filled
// from the rest of the order; size ≤ 0 or ≥ servers = the whole order.
func (c *call) writeSet(size int) []int32 {
	n := len(c.g.alive)
	need := n
	if size > 0 && size < n {
		// size × maxPerHost servers hold min(size, hosts) distinct hosts
		// and at least size servers.
		need = size * c.g.maxPerHost
	}
	order := c.st.order(c.g, kindServers, "", need)
	ws := c.st.idx[:0]
	if size <= 0 || size >= n {
		ws = append(ws, order...)
		c.st.idx = ws
		return ws
	}
	epoch := c.st.newHostEpoch(len(c.g.hosts))
	for _, i := range order {
		if len(ws) >= size {
			break
		}
		if h := c.g.hostOf[i]; c.st.hostMarks[h] != epoch {
			c.st.hostMarks[h] = epoch
			ws = append(ws, i)
		}
	}
	if len(ws) < size {
		// Fewer hosts than replicas: fill with the next servers in order.
		for _, i := range order {
			if len(ws) >= size {
				break
			}
			dup := false
			for _, j := range ws {
				dup = dup || i == j
			}
			if !dup {
				ws = append(ws, i)
			}
		}
	}
	c.st.idx = ws
	return ws
}
