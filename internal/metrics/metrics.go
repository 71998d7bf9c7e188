package metrics

import (
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/scanplane/scanplane/messages"
)

// SecondsHistogramOpts returns the options of a latency histogram in
// seconds: native (sparse) buckets growing by at most 10% per bucket, reset
// at most hourly when they exceed 160 buckets, plus classic buckets from
// 50µs to 10s for servers without native-histogram support. name must end
// in _seconds.
func SecondsHistogramOpts(name, help string) prometheus.HistogramOpts {
	return prometheus.HistogramOpts{
		Name: name, Help: help,
		Buckets:                         []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10},
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  160,
		NativeHistogramMinResetDuration: time.Hour,
	}
}

// outcomeLabels is the outcome label of scanplane_scanserver_scans_finished_total
// by messages.ErrorCode value: "ok" for none, else the code's name in lower
// case ("storage", "cancelled", ...).
var OutcomeLabels = func() []string {
	out := make([]string, NumOutcomes)
	for v := range out {
		out[v] = "code_" + strconv.Itoa(v)
		if name, ok := messages.ErrorCode_name[int32(v)]; ok {
			out[v] = strings.ToLower(strings.TrimPrefix(name, "ERROR_CODE_"))
		}
	}
	out[0] = "ok"
	return out
}()

// numOutcomes bounds the error codes counted one by one; a code beyond
// (none exists today) counts as internal.
const NumOutcomes = 16
