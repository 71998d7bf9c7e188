package selection

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseDuration parses an Accumulo duration: an unsigned integer followed
// by "d", "h", "m", "s" or "ms" (lower case); no suffix means seconds.
// Decimals, signs, spaces and other units are rejected.
func ParseDuration(s string) (time.Duration, error) {
	num, unit := s, time.Second
	switch {
	case strings.HasSuffix(s, "ms"):
		num, unit = s[:len(s)-2], time.Millisecond
	case strings.HasSuffix(s, "d"):
		num, unit = s[:len(s)-1], 24*time.Hour
	case strings.HasSuffix(s, "h"):
		num, unit = s[:len(s)-1], time.Hour
	case strings.HasSuffix(s, "m"):
		num, unit = s[:len(s)-1], time.Minute
	case strings.HasSuffix(s, "s"):
		num, unit = s[:len(s)-1], time.Second
	}
	if num == "" {
		return 0, fmt.Errorf("bad duration %q: no number", s)
	}
	for _, r := range num {
		if r < '0' || r > '9' {
			if r == '.' {
				return 0, fmt.Errorf("bad duration %q: decimals are not allowed", s)
			}
			return 0, fmt.Errorf("bad duration %q: want an integer and an optional unit d, h, m, s or ms", s)
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > int64(math.MaxInt64/unit) {
		return 0, fmt.Errorf("bad duration %q: too large", s)
	}
	return time.Duration(n) * unit, nil
}

// FormatDuration formats d in the largest Accumulo unit that divides it
// (d, h, m, s, ms); other values use Go's notation.
func FormatDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	for _, u := range []struct {
		d time.Duration
		s string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if d > 0 && d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.s
		}
	}
	return d.String()
}

// jsonDuration accepts a duration string or an integer number of seconds.
func jsonDuration(raw json.RawMessage) (time.Duration, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return ParseDuration(s)
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		return ParseDuration(n.String())
	}
	return 0, fmt.Errorf("bad duration %s: want a string such as \"33ms\"", raw)
}

// jsonInt accepts an integer number or a string holding one, in [lo, hi].
func jsonInt(raw json.RawMessage, lo, hi int64) (int64, error) {
	var text string
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		text = n.String()
	} else if err := json.Unmarshal(raw, &text); err != nil {
		return 0, fmt.Errorf("want an integer, got %s", raw)
	}
	v, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want an integer, got %s", raw)
	}
	if v < lo || v > hi {
		return 0, fmt.Errorf("%d is out of range [%d, %d]", v, lo, hi)
	}
	return v, nil
}

// jsonFloat accepts a number or a string holding one.
func jsonFloat(raw json.RawMessage) (float64, error) {
	var text string
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		text = n.String()
	} else if err := json.Unmarshal(raw, &text); err != nil {
		return 0, fmt.Errorf("want a number, got %s", raw)
	}
	v, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("want a number, got %s", raw)
	}
	return v, nil
}

// ParseServerCount parses an attemptPlans[].servers value: "N" with N > 0
// or "P%" with 0 < P ≤ 100 (integers).
func ParseServerCount(s string) (ServerCount, error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.Atoi(p)
		if err != nil || !allDigits(p) {
			return ServerCount{}, fmt.Errorf("bad server count %q: want \"N\" or \"P%%\" with an integer P", s)
		}
		if v <= 0 || v > 100 {
			return ServerCount{}, fmt.Errorf("bad server count %q: percentage must be in (0, 100]", s)
		}
		return ServerCount{Percent: v}, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || !allDigits(s) {
		return ServerCount{}, fmt.Errorf("bad server count %q: want \"N\" or \"P%%\"", s)
	}
	if v <= 0 {
		return ServerCount{}, fmt.Errorf("bad server count %q: must be > 0", s)
	}
	return ServerCount{N: v}, nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

type member struct {
	key string
	raw json.RawMessage
}

// decodeObject splits a JSON object into its members, in order, rejecting
// duplicate keys. null members are dropped (treated as absent).
func decodeObject(raw json.RawMessage) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("want a JSON object, got %s", firstWord(raw))
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		for _, m := range out {
			if m.key == key {
				return nil, fmt.Errorf("field %q appears twice", key)
			}
		}
		if string(v) == "null" {
			continue
		}
		out = append(out, member{key, v})
	}
	return out, nil
}

func firstWord(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	if len(s) > 20 {
		s = s[:20] + "…"
	}
	return s
}

// profileErr builds errors that name the profile and field.
type profileErr struct {
	idx  int
	name string
}

func (pe *profileErr) label() string {
	if pe.name != "" {
		return fmt.Sprintf("profile %d (%q)", pe.idx, pe.name)
	}
	return fmt.Sprintf("profile %d", pe.idx)
}

func (pe *profileErr) field(field string, err error) error {
	return fmt.Errorf("%w: %s: field %q: %v", ErrBadConfig, pe.label(), field, err)
}

func (pe *profileErr) fieldf(field, format string, args ...any) error {
	return pe.field(field, fmt.Errorf(format, args...))
}

// ParseProfiles parses and validates a profiles JSON document: Accumulo's
// profiles array as is, or an object {"profiles": [...]}. Every error wraps
// ErrBadConfig (and ErrUnknownPolicy for an unknown policy) and names the
// profile and the field.
func ParseProfiles(data []byte) (*Profiles, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%w: empty profiles document", ErrBadConfig)
	}
	var items []json.RawMessage
	if trimmed[0] == '{' {
		ms, err := decodeObject(trimmed)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
		}
		var found bool
		for _, m := range ms {
			if m.key != "profiles" {
				return nil, fmt.Errorf("%w: unknown field %q at top level (want \"profiles\")", ErrBadConfig, m.key)
			}
			found = true
			if err := strictUnmarshal(m.raw, &items); err != nil {
				return nil, fmt.Errorf("%w: field \"profiles\": want an array of profiles: %v", ErrBadConfig, err)
			}
		}
		if !found {
			return nil, fmt.Errorf("%w: missing field \"profiles\"", ErrBadConfig)
		}
	} else if err := strictUnmarshal(trimmed, &items); err != nil {
		return nil, fmt.Errorf("%w: want a JSON array of profiles: %v", ErrBadConfig, err)
	}
	list := make([]*Profile, 0, len(items))
	for i, raw := range items {
		p, err := parseProfile(i, raw)
		if err != nil {
			return nil, err
		}
		list = append(list, p)
	}
	return buildProfiles(list)
}

func strictUnmarshal(raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("%v (at byte %d)", err, se.Offset)
		}
		return err
	}
	return nil
}

// coreFields are Accumulo's profile fields plus "name" and "policy".
var coreFields = []string{"name", "isDefault", "scanTypeActivations", "group", "timeToWaitForScanServers",
	"maxBusyTimeout", "busyTimeoutMultiplier", "attemptPlans", "policy"}

func parseProfile(idx int, raw json.RawMessage) (*Profile, error) {
	pe := &profileErr{idx: idx}
	ms, err := decodeObject(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadConfig, pe.label(), err)
	}
	get := func(k string) (json.RawMessage, bool) {
		for _, m := range ms {
			if m.key == k {
				return m.raw, true
			}
		}
		return nil, false
	}
	p := &Profile{Group: DefaultGroup, Policy: PolicyAccumulo, TimeToWaitForScanServers: 36500 * 24 * time.Hour}

	// Identity first, so later messages can name the profile.
	if r, ok := get("name"); ok {
		if err := json.Unmarshal(r, &p.Name); err != nil || p.Name == "" {
			return nil, pe.fieldf("name", "want a non-empty string, got %s", r)
		}
		pe.name = p.Name
	}
	if r, ok := get("isDefault"); ok {
		if err := json.Unmarshal(r, &p.IsDefault); err != nil {
			return nil, pe.fieldf("isDefault", "want true or false, got %s", r)
		}
	}
	if r, ok := get("scanTypeActivations"); ok {
		if err := json.Unmarshal(r, &p.ScanTypeActivations); err != nil {
			return nil, pe.fieldf("scanTypeActivations", "want an array of strings, got %s", firstWord(r))
		}
		for _, st := range p.ScanTypeActivations {
			if st == "" {
				return nil, pe.fieldf("scanTypeActivations", "empty scan type")
			}
		}
	}
	if p.ScanTypeActivations == nil {
		p.ScanTypeActivations = []string{}
	}
	if p.Name == "" {
		switch {
		case p.IsDefault:
			p.Name = "default"
		case len(p.ScanTypeActivations) > 0:
			p.Name = p.ScanTypeActivations[0]
		default:
			p.Name = fmt.Sprintf("profile%d", idx)
		}
		pe.name = p.Name
	}
	if r, ok := get("policy"); ok {
		if err := json.Unmarshal(r, &p.Policy); err != nil {
			return nil, pe.fieldf("policy", "want a string, got %s", r)
		}
		if !knownPolicy(p.Policy) {
			return nil, fmt.Errorf("%w: %s: field \"policy\": %w %q (known: %s)", ErrBadConfig, pe.label(),
				ErrUnknownPolicy, p.Policy, strings.Join(PolicyNames(), ", "))
		}
	}
	p.Options = DefaultOptions(p.Policy)

	for _, m := range ms {
		r := m.raw
		switch m.key {
		case "name", "isDefault", "scanTypeActivations", "policy":
		case "group":
			if err := json.Unmarshal(r, &p.Group); err != nil || p.Group == "" {
				return nil, pe.fieldf("group", "want a non-empty string, got %s", r)
			}
		case "timeToWaitForScanServers":
			d, err := jsonDuration(r)
			if err != nil {
				return nil, pe.field(m.key, err)
			}
			p.TimeToWaitForScanServers = d
		case "maxBusyTimeout":
			d, err := jsonDuration(r)
			if err != nil {
				return nil, pe.field(m.key, err)
			}
			p.MaxBusyTimeout = d
		case "busyTimeoutMultiplier":
			v, err := jsonInt(r, 0, math.MaxInt32)
			if err != nil {
				return nil, pe.field(m.key, err)
			}
			p.BusyTimeoutMultiplier = int(v)
		case "attemptPlans":
			plans, err := parsePlans(pe, r)
			if err != nil {
				return nil, err
			}
			p.AttemptPlans = plans
		default:
			spec := findOption(m.key)
			if spec == nil {
				return nil, pe.fieldf(m.key, "unknown field (Accumulo fields: %s; options of policy %q: %s)",
					strings.Join(coreFields, ", "), p.Policy, orNone(optionsFor(p.Policy)))
			}
			if !spec.appliesTo(p.Policy) {
				return nil, pe.fieldf(m.key, "not an option of policy %q (it applies to %s; %q takes: %s)",
					p.Policy, strings.Join(spec.applies, ", "), p.Policy, orNone(optionsFor(p.Policy)))
			}
			if err := spec.set(&p.Options, r); err != nil {
				return nil, pe.field(m.key, err)
			}
			p.Explicit = append(p.Explicit, m.key)
		}
	}
	if _, ok := get("attemptPlans"); !ok {
		if p.Policy == PolicyAccumulo || p.Policy == PolicyAccumuloHost {
			return nil, pe.fieldf("attemptPlans", "missing (required for policy %q)", p.Policy)
		}
		p.AttemptPlans = append([]AttemptPlan(nil), defaultPlans...)
	}
	if f, err := validateOptions(p.Policy, &p.Options); err != nil {
		return nil, pe.field(f, err)
	}
	// Keep Explicit in table order.
	var ordered []string
	for i := range optionSpecs {
		for _, e := range p.Explicit {
			if e == optionSpecs[i].name {
				ordered = append(ordered, e)
			}
		}
	}
	p.Explicit = ordered
	return p, nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func parsePlans(pe *profileErr, raw json.RawMessage) ([]AttemptPlan, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, pe.fieldf("attemptPlans", "want an array of plans, got %s", firstWord(raw))
	}
	if len(items) == 0 {
		return nil, pe.fieldf("attemptPlans", "must hold at least one plan")
	}
	plans := make([]AttemptPlan, 0, len(items))
	for i, it := range items {
		f := func(name string) string { return fmt.Sprintf("attemptPlans[%d].%s", i, name) }
		ms, err := decodeObject(it)
		if err != nil {
			return nil, pe.field(fmt.Sprintf("attemptPlans[%d]", i), err)
		}
		var ap AttemptPlan
		var haveServers, haveBusy bool
		for _, m := range ms {
			switch m.key {
			case "servers":
				var s string
				if err := json.Unmarshal(m.raw, &s); err != nil {
					var n json.Number
					if err := json.Unmarshal(m.raw, &n); err != nil {
						return nil, pe.fieldf(f("servers"), "want \"N\" or \"P%%\", got %s", m.raw)
					}
					s = n.String()
				}
				c, err := ParseServerCount(s)
				if err != nil {
					return nil, pe.field(f("servers"), err)
				}
				ap.Servers, haveServers = c, true
			case "busyTimeout":
				d, err := jsonDuration(m.raw)
				if err != nil {
					return nil, pe.field(f("busyTimeout"), err)
				}
				ap.BusyTimeout, haveBusy = d, true
			case "salt":
				if err := json.Unmarshal(m.raw, &ap.Salt); err != nil {
					return nil, pe.fieldf(f("salt"), "want a string, got %s", m.raw)
				}
			default:
				return nil, pe.fieldf(f(m.key), "unknown field (a plan has servers, busyTimeout, salt)")
			}
		}
		if !haveServers {
			return nil, pe.fieldf(f("servers"), "missing")
		}
		if !haveBusy {
			return nil, pe.fieldf(f("busyTimeout"), "missing")
		}
		plans = append(plans, ap)
	}
	return plans, nil
}
