package load

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// FormatCount writes n briefly: 950, 12.3k, 1.2M.
func FormatCount(n float64) string {
	switch a := math.Abs(n); {
	case a >= 1e6:
		return strconv.FormatFloat(n/1e6, 'f', 1, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(n/1e3, 'f', 0, 64) + "k"
	case a >= 1e3:
		return strconv.FormatFloat(n/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(n, 'f', 0, 64)
}

// FormatThousands writes n rounded, with thousands separators: 123,456.
func FormatThousands(n float64) string {
	s := strconv.FormatInt(int64(math.Round(n)), 10)
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	var b []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, s[i])
	}
	if neg {
		return "-" + string(b)
	}
	return string(b)
}

// FormatBytes writes a size: 64 B, 1 KiB, 1.5 MiB.
func FormatBytes(n int) string {
	f := float64(n)
	switch a := math.Abs(f); {
	case a >= 1<<30:
		return trimFloat(f/(1<<30)) + " GiB"
	case a >= 1<<20:
		return trimFloat(f/(1<<20)) + " MiB"
	case a >= 1<<10 && n%(1<<10) == 0 || a >= 10<<10:
		return trimFloat(f/(1<<10)) + " KiB"
	}
	return strconv.Itoa(n) + " B"
}

func trimFloat(f float64) string {
	if f == math.Trunc(f) {
		return strconv.FormatFloat(f, 'f', 0, 64)
	}
	return strconv.FormatFloat(f, 'f', 1, 64)
}

// FormatLatency writes d in microseconds, or milliseconds from 10 ms.
func FormatLatency(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	us := float64(d) / float64(time.Microsecond)
	switch {
	case us >= 10_000:
		return strconv.FormatFloat(us/1000, 'f', 0, 64) + " ms"
	case us >= 1000:
		return strconv.FormatFloat(us/1000, 'f', 1, 64) + " ms"
	case us >= 100:
		return strconv.FormatFloat(us, 'f', 0, 64) + " µs"
	}
	return strconv.FormatFloat(us, 'f', 1, 64) + " µs"
}

// FormatSeconds writes d in seconds to two decimals: 1.33 s.
func FormatSeconds(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + " s"
}

// FormatRatio writes r as 1.53×.
func FormatRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "—"
	}
	return fmt.Sprintf("%.2f×", r)
}

// ratio is a/b, NaN when either side is missing.
func ratio(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return math.NaN()
	}
	return a / b
}
