package selection

import (
	"math"
	"slices"
	"time"
)

// c3Policy is "c3": C3's replica ranking (Suresh et al., "C3: Cutting Tail
// Latency in Cloud Data Stores via Adaptive Replica Selection", NSDI'15);
// docs/policies.md (c3).
//
// Each candidate s is scored as in the paper and its reference
// implementations (cassandra-c3 c3/ScoreTracker.getScore, absim
// simulations/client.py computeExpectedDelay):
//
//	Ψ_s = (R̄_s − 1/μ̄_s) + q̂_s³ / μ̄_s,   q̂_s = 1 + os_s·n + q̄_s
//
// and the scan goes to the lowest Ψ (ties: the earlier replica).
//
//   - Candidates: the tablet's replicas, the first writeSetSize servers of
//     its rendezvous order on distinct hosts (bookkeeper's write set; C3
//     ranks the replica group of a key), preferring those this scan has not
//     tried.
//   - os_s: this coordinator's scans in flight there (ServerLoad.InFlight);
//     n: c3Clients.
//   - q̄_s: the server's last reported queue of waiting scans
//     (ServerLoad.QueueLen, from heartbeats, busy answers and the
//     ScanStarted of this coordinator's scans; absim reports the wait
//     queue). C3 keeps an EWMA of per-response reports with weight 0.9 on
//     the newest (ScoreTracker.ALPHA), i.e. mostly the last report;
//     scanplane uses the last report.
//   - R̄_s: the coordinator's average dispatch → first data time
//     (LoadView.StartLatencyOf); a server with no sample gets the fleet
//     median (1 ms when that is unknown). C3 scores a server with no
//     history 0 so that it is tried first; with scans arriving in bursts
//     that sends every scan to it until its first answer.
//   - 1/μ̄_s, the service time, is not reported by scan servers. It is
//     derived: with q̄_s scans waiting for w_s workers a scan waits about
//     q̄_s/w_s service times before its own, so 1/μ̄_s = R̄_s / (1 + q̄_s/w_s)
//     and R̄_s − 1/μ̄_s is the waiting (and network) part of R̄_s, the
//     quantity C3 computes as response time − reported service time.
//   - C3's per-server cubic rate control (and its backlog queue) is not
//     implemented: this is the ranking only. No hedging.
type c3Policy struct{ p *Profile }

// c3DefaultResponse is R̄ for a server without a sample while the fleet
// median is unknown too.
const c3DefaultResponse = time.Millisecond

// c3Score is Ψ = (r − s) + (1 + os·n + q)³ · s, with r the response
// time, s the service time (1/μ̄), os this client's outstanding requests,
// n the number of clients and q the server's queue.
func c3Score(r, s, os, n, q float64) float64 {
	qh := 1 + os*n + q
	return (r - s) + qh*qh*qh*s
}

// c3Inputs derives C3's inputs for one server (see c3Policy): response
// time and service time in ns, outstanding requests and queue size.
func c3Inputs(v *LoadView, s *ServerLoad, now time.Time) (r, svc, os, q float64) {
	rt := v.StartLatencyOf(s, now)
	if rt <= 0 {
		rt = v.StartLatencyP50
	}
	if rt <= 0 {
		rt = c3DefaultResponse
	}
	q = float64(max(0, s.QueueLen))
	w := float64(max(1, s.Workers))
	r = float64(rt)
	svc = r / (1 + q/w)
	return r, svc, float64(max(0, s.InFlight)), q
}

func (pol c3Policy) Select(in *Input) (Decision, error) {
	var c call
	if err := c.beginFirst(in, pol.p); err != nil {
		return Decision{}, err
	}
	o := &c.p.Options
	n := float64(max(1, o.C3Clients))
	ws := c.writeSet(o.WriteSetSize)
	cands := c.preferFresh(ws, c.st.idx2)
	c.st.idx2 = cands
	scores := c.st.scores[:0]
	best, bs := int32(-1), math.Inf(1)
	for _, i := range cands {
		r, svc, os, q := c3Inputs(c.v, c.g.alive[i], c.now)
		sc := c3Score(r, svc, os, n, q)
		scores = append(scores, sc)
		if sc < bs {
			best, bs = i, sc
		}
	}
	c.st.scores = scores
	if best < 0 {
		best = cands[0] // every score NaN: cannot happen with finite inputs
	}
	d := c.decisionA5(best)
	if in.Explain {
		k := make([]int, len(cands))
		for j := range k {
			k[j] = j
		}
		slices.SortStableFunc(k, func(x, y int) int {
			switch {
			case scores[x] < scores[y]:
				return -1
			case scores[x] > scores[y]:
				return 1
			}
			return 0
		})
		idx := make([]int32, len(k))
		d.Scores = make([]float64, len(k))
		for j, x := range k {
			idx[j], d.Scores[j] = cands[x], scores[x]/1e6
		}
		d.Candidates = c.explain(idx)
	}
	return d, nil
}
