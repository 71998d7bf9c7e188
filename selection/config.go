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
	"unicode/utf16"
	"unicode/utf8"
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
		// Gson's nextInt also takes a number with an integral value (8.0, 8e0).
		f, ok := javaParseDouble(text)
		if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return 0, fmt.Errorf("want an integer, got %s", raw)
		}
		v = int64(f)
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

// ParseServerCount parses an attemptPlans[].servers value as Accumulo's
// ConfigurableScanServerSelector does: "P%" with P read by Java's
// Double.parseDouble (so "12.5%" and " 50 %" too) and 0 < P ≤ 100, else
// "N" read by Integer.parseInt (so "+3" too) with N > 0.
func ParseServerCount(s string) (ServerCount, error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		v, ok := javaParseDouble(p)
		if !ok {
			return ServerCount{}, fmt.Errorf("bad server count %q: want \"N\" or \"P%%\" with a number P", s)
		}
		if v <= 0 || v > 100 || math.IsNaN(v) || math.IsInf(v, 0) {
			return ServerCount{}, fmt.Errorf("bad server count %q: percentage must be in (0, 100]", s)
		}
		return ServerCount{Percent: v}, nil
	}
	v, ok := javaParseInt(s)
	if !ok {
		return ServerCount{}, fmt.Errorf("bad server count %q: want \"N\" (a 32-bit integer) or \"P%%\"", s)
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

// decodeObject splits a JSON object into its members, in order. A key
// given twice keeps its last value, as in Gson, and is listed in dups.
// null members are dropped (treated as absent).
func decodeObject(raw json.RawMessage) (out []member, dups []string, err error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, fmt.Errorf("want a JSON object, got %s", firstWord(raw))
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		for i, m := range out {
			if m.key == key {
				dups = append(dups, key)
				out = append(out[:i], out[i+1:]...)
				break
			}
		}
		if string(v) == "null" {
			continue
		}
		out = append(out, member{key, v})
	}
	return out, dups, nil
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
	idx   int
	name  string
	warns *[]string // where warnings go; nil drops them
}

func (pe *profileErr) warnf(field, format string, args ...any) {
	if pe.warns != nil {
		*pe.warns = append(*pe.warns, fmt.Sprintf("%s: field %q: %s", pe.label(), field, fmt.Sprintf(format, args...)))
	}
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
// profiles array as is, or an object {"profiles": [...]}, in the lenient
// syntax Accumulo's parser (Gson) accepts: single-quoted or unquoted
// strings, comments, "true" as a string, numbers where strings are
// expected. Unknown fields and keys given twice (the last wins) are
// accepted as Accumulo does and reported by Profiles.Warnings. Every error
// wraps ErrBadConfig (and ErrUnknownPolicy for an unknown policy) and
// names the profile and the field.
func ParseProfiles(data []byte) (*Profiles, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%w: empty profiles document", ErrBadConfig)
	}
	trimmed, err := lenientToJSON(trimmed)
	if err != nil {
		return nil, fmt.Errorf("%w: want a JSON array of profiles: %v", ErrBadConfig, err)
	}
	trimmed = bytes.TrimSpace(trimmed)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%w: empty profiles document", ErrBadConfig)
	}
	var warns []string
	var items []json.RawMessage
	if trimmed[0] == '{' {
		ms, _, err := decodeObject(trimmed)
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
		p, err := parseProfile(i, raw, &warns)
		if err != nil {
			return nil, err
		}
		list = append(list, p)
	}
	ps, err := buildProfiles(list)
	if err != nil {
		return nil, err
	}
	ps.warnings = warns
	return ps, nil
}

func strictUnmarshal(raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("%v (at byte %d of the document rewritten as strict JSON)", err, se.Offset)
		}
		return err
	}
	return nil
}

// coreFields are Accumulo's profile fields plus "name" and "policy".
var coreFields = []string{"name", "isDefault", "scanTypeActivations", "group", "timeToWaitForScanServers",
	"maxBusyTimeout", "busyTimeoutMultiplier", "attemptPlans", "policy"}

func parseProfile(idx int, raw json.RawMessage, warns *[]string) (*Profile, error) {
	pe := &profileErr{idx: idx, warns: warns}
	ms, dups, err := decodeObject(raw)
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
		if p.Name, ok = jsonString(r); !ok || p.Name == "" {
			return nil, pe.fieldf("name", "want a non-empty string, got %s", r)
		}
		pe.name = p.Name
		p.explicitName = true
	}
	if r, ok := get("isDefault"); ok {
		// Gson reads a string as Boolean.parseBoolean does: "true" in any
		// case is true, anything else false.
		var s string
		if json.Unmarshal(r, &s) == nil {
			p.IsDefault = strings.EqualFold(s, "true")
		} else if err := json.Unmarshal(r, &p.IsDefault); err != nil {
			return nil, pe.fieldf("isDefault", "want true or false, got %s", r)
		}
	}
	if r, ok := get("scanTypeActivations"); ok {
		var items []json.RawMessage
		if err := json.Unmarshal(r, &items); err != nil {
			return nil, pe.fieldf("scanTypeActivations", "want an array of strings, got %s", firstWord(r))
		}
		for _, it := range items {
			st, ok := jsonString(it)
			if !ok {
				return nil, pe.fieldf("scanTypeActivations", "want an array of strings, got %s", firstWord(it))
			}
			// "" is a scan type like any other, as in Accumulo: a hint
			// scan_type="" selects the profile it activates.
			p.ScanTypeActivations = append(p.ScanTypeActivations, st)
		}
	}
	if p.ScanTypeActivations == nil {
		p.ScanTypeActivations = []string{}
	}
	if p.Name == "" {
		switch {
		case p.IsDefault:
			p.Name = "default"
		case len(p.ScanTypeActivations) > 0 && p.ScanTypeActivations[0] != "":
			p.Name = p.ScanTypeActivations[0]
		default:
			p.Name = fmt.Sprintf("profile%d", idx)
		}
		pe.name = p.Name
	}
	for _, d := range dups {
		pe.warnf(d, "given twice; the last value is used")
	}
	if r, ok := get("policy"); ok {
		if p.Policy, ok = jsonString(r); !ok {
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
			var ok bool
			if p.Group, ok = jsonString(r); !ok || p.Group == "" {
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
				// Accumulo (Gson) ignores unknown fields.
				pe.warnf(m.key, "unknown field, ignored (Accumulo fields: %s; options of policy %q: %s)",
					strings.Join(coreFields, ", "), p.Policy, orNone(optionsFor(p.Policy)))
				continue
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
	applyCacheAffinity(p.Policy, &p.Options, p.Explicit)
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
		ms, dups, err := decodeObject(it)
		if err != nil {
			return nil, pe.field(fmt.Sprintf("attemptPlans[%d]", i), err)
		}
		for _, d := range dups {
			pe.warnf(f(d), "given twice; the last value is used")
		}
		var ap AttemptPlan
		var haveServers, haveBusy bool
		for _, m := range ms {
			switch m.key {
			case "servers":
				s, ok := jsonString(m.raw)
				if !ok {
					return nil, pe.fieldf(f("servers"), "want \"N\" or \"P%%\", got %s", m.raw)
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
				var ok bool
				if ap.Salt, ok = jsonString(m.raw); !ok {
					return nil, pe.fieldf(f("salt"), "want a string, got %s", m.raw)
				}
			default:
				pe.warnf(f(m.key), "unknown field, ignored (a plan has servers, busyTimeout, salt)")
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

// lenientToJSON rewrites a document in the lenient syntax Accumulo's
// parser (Gson, lenient) accepts into strict JSON: strings in single or
// double quotes, unquoted names and string values, comments (//, # and
// /* */), '=' or '=>' between name and value, ';' between elements, and
// the keywords true, false and null in any case. Numbers keep their
// literal text. It does not check the structure; json does that after.
func lenientToJSON(data []byte) ([]byte, error) {
	out := make([]byte, 0, len(data)+16)
	isLiteral := func(c byte) bool {
		switch c {
		case '/', '\\', ';', '#', '=', '{', '}', '[', ']', ':', ',', ' ', '\t', '\f', '\r', '\n', '"', '\'':
			return false
		}
		return true
	}
	for i := 0; i < len(data); {
		c := data[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			i++
		case c == '#' || (c == '/' && i+1 < len(data) && data[i+1] == '/'):
			for i < len(data) && data[i] != '\n' && data[i] != '\r' {
				i++
			}
		case c == '/' && i+1 < len(data) && data[i+1] == '*':
			end := bytes.Index(data[i+2:], []byte("*/"))
			if end < 0 {
				return nil, fmt.Errorf("unterminated comment at byte %d", i)
			}
			i += 2 + end + 2
		case c == '{' || c == '}' || c == '[' || c == ']' || c == ':' || c == ',':
			out = append(out, c)
			i++
		case c == ';':
			out = append(out, ',')
			i++
		case c == '=':
			out = append(out, ':')
			i++
			if i < len(data) && data[i] == '>' {
				i++
			}
		case c == '"' || c == '\'':
			s, n, err := lenientString(data[i:])
			if err != nil {
				return nil, fmt.Errorf("%v at byte %d", err, i)
			}
			q, _ := json.Marshal(s)
			out = append(out, q...)
			i += n
		default:
			j := i
			for j < len(data) && isLiteral(data[j]) {
				j++
			}
			if j == i {
				return nil, fmt.Errorf("unexpected character %q at byte %d", c, i)
			}
			lit := string(data[i:j])
			switch lower := strings.ToLower(lit); {
			case lower == "true" || lower == "false" || lower == "null":
				out = append(out, lower...)
			case jsonNumber(lit):
				out = append(out, lit...)
			default:
				q, _ := json.Marshal(lit)
				out = append(out, q...)
			}
			i = j
		}
		out = append(out, ' ')
	}
	return out, nil
}

// lenientString decodes the quoted string at the start of b (quote ' or ")
// with Gson's escapes; it returns the string and the bytes consumed.
func lenientString(b []byte) (string, int, error) {
	quote := b[0]
	var sb strings.Builder
	for i := 1; i < len(b); i++ {
		c := b[i]
		switch {
		case c == quote:
			return sb.String(), i + 1, nil
		case c == '\\':
			i++
			if i >= len(b) {
				return "", 0, errors.New("unterminated string")
			}
			switch e := b[i]; e {
			case 'u':
				if i+4 >= len(b) {
					return "", 0, errors.New("bad \\u escape")
				}
				v, err := strconv.ParseUint(string(b[i+1:i+5]), 16, 16)
				if err != nil {
					return "", 0, errors.New("bad \\u escape")
				}
				i += 4
				r := rune(v)
				if utf16.IsSurrogate(r) && i+6 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
					if lo, err := strconv.ParseUint(string(b[i+3:i+7]), 16, 16); err == nil {
						if pair := utf16.DecodeRune(r, rune(lo)); pair != utf8.RuneError {
							r = pair
							i += 6
						}
					}
				}
				sb.WriteRune(r)
			case 't':
				sb.WriteByte('\t')
			case 'b':
				sb.WriteByte('\b')
			case 'n':
				sb.WriteByte('\n')
			case 'r':
				sb.WriteByte('\r')
			case 'f':
				sb.WriteByte('\f')
			case '\'', '"', '\\', '/', '\n':
				sb.WriteByte(e)
			default:
				return "", 0, fmt.Errorf("bad escape \\%c", e)
			}
		default:
			sb.WriteByte(c)
		}
	}
	return "", 0, errors.New("unterminated string")
}

// jsonNumber reports whether s is a number in JSON syntax.
func jsonNumber(s string) bool {
	var n json.Number
	return json.Unmarshal([]byte(s), &n) == nil
}

// jsonString accepts what Gson reads into a String field: a string, a
// number (its literal text) or a boolean ("true"/"false").
func jsonString(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String(), true
	}
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		return strconv.FormatBool(b), true
	}
	return "", false
}

// javaParseInt is Java's Integer.parseInt for ASCII digits: an optional
// sign, then digits, within int32.
func javaParseInt(s string) (int, bool) {
	d := strings.TrimLeft(s, "+-")
	if len(s)-len(d) > 1 || !allDigits(d) {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 32)
	return int(v), err == nil
}

// javaParseDouble is Java's Double.parseDouble: surrounding characters
// <= ' ' are trimmed; an optional sign; "NaN", "Infinity", a decimal with
// an optional exponent, or a hexadecimal with a binary exponent; an
// optional f, F, d or D suffix.
func javaParseDouble(s string) (float64, bool) {
	s = strings.TrimFunc(s, func(r rune) bool { return r <= ' ' })
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 {
		return 0, false
	}
	neg := strings.HasPrefix(s, "-")
	switch body {
	case "NaN":
		return math.NaN(), true
	case "Infinity":
		if neg {
			return math.Inf(-1), true
		}
		return math.Inf(1), true
	}
	if n := len(body); n > 0 && strings.ContainsRune("fFdD", rune(body[n-1])) {
		body = body[:n-1]
	}
	if len(body) > 2 && (body[:2] == "0x" || body[:2] == "0X") {
		for _, r := range body[2:] {
			if !strings.ContainsRune("0123456789abcdefABCDEF.pP+-", r) {
				return 0, false
			}
		}
		if !strings.ContainsAny(body, "pP") {
			return 0, false
		}
	} else {
		mant, exp := body, ""
		if k := strings.IndexAny(body, "eE"); k >= 0 {
			mant, exp = body[:k], strings.TrimLeft(body[k+1:], "+-")
			if len(body[k+1:])-len(exp) > 1 || !allDigits(exp) {
				return 0, false
			}
		}
		ip, fp, _ := strings.Cut(mant, ".")
		if (ip == "" && fp == "") || (ip != "" && !allDigits(ip)) || (fp != "" && !allDigits(fp)) {
			return 0, false
		}
	}
	if strings.Contains(body, "_") {
		return 0, false
	}
	v, err := strconv.ParseFloat(body, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	if neg {
		v = -v
	}
	return v, true
}
