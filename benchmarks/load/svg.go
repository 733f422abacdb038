package load

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
	"time"
)

// The charts are plain SVG written by hand: no dependency, and a browser or
// GitHub renders them as they are.
const (
	chartWidth  = 860
	chartLeft   = 210 // labels end here and the plot starts
	chartRight  = 100 // room for the value labels
	chartTop    = 70  // title and legend above
	chartFont   = `font-family="system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif"`
	colorGood   = "#2e7d32"
	colorBad    = "#e65100"
	colorBase   = "#9e9e9e"
	colorGrid   = "#e0e0e0"
	colorText   = "#212121"
	colorSubtle = "#616161"
)

// barRow is one bar of a ratio chart.
type barRow struct {
	Label  string
	Value  float64 // NaN: no bar; Note is shown instead
	Note   string
	Target float64 // a goal's ratio, drawn as a marker; 0 for none
}

// RatioSVG charts Sprout's throughput over beanstalkd's, one bar per timed
// scenario, with a line at 1.0 and a marker at each goal.
func RatioSVG(outs []Outcome, base, cand string) string {
	targets := goalTargets(MetricJobsPerSec)
	var rows []barRow
	for _, o := range outs {
		// A cluster has no beanstalkd counterpart: its goals set it
		// against other scenarios, in the report's tables.
		if !o.Scenario.timed() || o.Scenario.Members > 0 {
			continue
		}
		rows = append(rows, ratioRow(o.Scenario.Name, Summarize(o.Runs[cand]), Summarize(o.Runs[base]), MetricJobsPerSec, targets[o.Scenario.Name]))
	}
	return barChart(fmt.Sprintf("Throughput: %s ÷ %s (jobs/s, higher is better)", cand, base),
		fmt.Sprintf("median of alternating runs on the same machine; 1.0 = %s", base), rows, true, base)
}

// ResourcesSVG charts Sprout's server CPU per job and memory per connection
// and per stored job over beanstalkd's; lower is better.
func ResourcesSVG(outs []Outcome, base, cand string) string {
	cpuTargets, memTargets := goalTargets(MetricCPU), goalTargets(MetricPerItem)
	var rows []barRow
	for _, o := range outs {
		sc, sb := Summarize(o.Runs[cand]), Summarize(o.Runs[base])
		if o.Scenario.timed() && o.Scenario.Members == 0 {
			rows = append(rows, ratioRow("CPU/job "+o.Scenario.Name, sc, sb, MetricCPU, cpuTargets[o.Scenario.Name]))
		}
	}
	for _, o := range outs {
		sc, sb := Summarize(o.Runs[cand]), Summarize(o.Runs[base])
		switch o.Scenario.Kind {
		case KindIdle:
			rows = append(rows, ratioRow("RSS/conn "+o.Scenario.Name, sc, sb, MetricPerItem, memTargets[o.Scenario.Name]))
		case KindJobMemory:
			rows = append(rows, ratioRow("RSS/job "+o.Scenario.Name, sc, sb, MetricPerItem, memTargets[o.Scenario.Name]))
		}
	}
	return barChart(fmt.Sprintf("Server CPU per job and memory: %s ÷ %s (lower is better)", cand, base),
		fmt.Sprintf("CPU from /proc/PID/stat, memory from VmRSS; 1.0 = %s", base), rows, false, base)
}

func ratioRow(label string, cand, base Summary, m Metric, target float64) barRow {
	row := barRow{Label: label, Value: math.NaN(), Target: target}
	switch {
	case cand.Skipped != "":
		row.Note = cand.Skipped
	case !cand.OK || !base.OK:
		row.Note = "failed run"
	default:
		row.Value = ratio(m.of(cand), m.of(base))
		if math.IsNaN(row.Value) {
			row.Note = "no figure"
		}
	}
	return row
}

// goalTargets maps scenario names to the ratio their goal on m asks for.
func goalTargets(m Metric) map[string]float64 {
	t := map[string]float64{}
	for _, g := range Goals {
		if g.Metric == m && g.Against == "" && !g.Absolute {
			t[g.Scenario] = g.Target
		}
	}
	return t
}

// barChart draws one bar per row from the 1.0 line, on a logarithmic axis so
// that 2× and 0.5× are as long as each other.
func barChart(title, subtitle string, rows []barRow, higherBetter bool, base string) string {
	const rowH, barH = 24, 15
	plotW := float64(chartWidth - chartLeft - chartRight)
	top := chartTop
	height := top + len(rows)*rowH + 56

	lo, hi := 0.5, 2.0
	for _, r := range rows {
		if !math.IsNaN(r.Value) {
			// Room beyond the bar's end for its label, on either side.
			lo, hi = math.Min(lo, r.Value/1.6), math.Max(hi, r.Value*1.3)
		}
		if r.Target > 0 {
			lo, hi = math.Min(lo, r.Target/1.15), math.Max(hi, r.Target*1.15)
		}
	}
	lo, hi = math.Max(lo, 1.0/64), math.Min(hi, 64)
	lo = math.Pow(2, math.Floor(math.Log2(lo)*2)/2)
	hi = math.Pow(2, math.Ceil(math.Log2(hi)*2)/2)
	x := func(v float64) float64 {
		v = math.Max(lo, math.Min(v, hi))
		return chartLeft + (math.Log2(v)-math.Log2(lo))/(math.Log2(hi)-math.Log2(lo))*plotW
	}

	var b strings.Builder
	svgOpen(&b, height, title, subtitle)
	bottom := top + len(rows)*rowH
	lastTick := math.Inf(-1)
	for _, v := range []float64{1.0 / 64, 1.0 / 32, 1.0 / 16, 1.0 / 8, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64} {
		if v < lo*0.999 || v > hi*1.001 || x(v)-lastTick < 34 {
			continue
		}
		lastTick = x(v)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x(v), top-6, x(v), bottom, colorGrid)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="11" fill="%s">%s</text>`+"\n", x(v), bottom+16, colorSubtle, tickRatio(v))
	}
	one := x(1)
	for i, r := range rows {
		y := top + i*rowH
		mid := y + rowH/2
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" font-size="12" fill="%s">%s</text>`+"\n", chartLeft-8, mid+4, colorText, esc(r.Label))
		// Bar first, then the goal marker over it, then the value label
		// over both.
		var label string
		if math.IsNaN(r.Value) {
			label = fmt.Sprintf(`<text x="%.1f" y="%d" font-size="11" font-style="italic" fill="%s">%s</text>`, one+6, mid+4, colorSubtle, esc(r.Note))
		} else {
			good := r.Value >= 1
			if !higherBetter {
				good = r.Value <= 1
			}
			color := colorBad
			if good {
				color = colorGood
			}
			end := x(r.Value)
			left, width := math.Min(one, end), math.Abs(end-one)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %s</title></rect>`+"\n",
				left, mid-barH/2, math.Max(width, 1), barH, color, esc(r.Label), FormatRatio(r.Value))
			lx, anchor := end+5, "start"
			if r.Value < 1 {
				lx, anchor = end-5, "end"
			}
			label = fmt.Sprintf(`<text x="%.1f" y="%d" text-anchor="%s" font-size="11" font-weight="bold" fill="%s" stroke="white" stroke-width="3" paint-order="stroke">%s</text>`,
				lx, mid+4, anchor, colorText, FormatRatio(r.Value))
		}
		if r.Target > 0 {
			op := "≥"
			if !higherBetter {
				op = "≤"
			}
			tx := x(r.Target)
			fmt.Fprintf(&b, `<path d="M%.1f %d l-4 -5 h8 z M%.1f %d v%d" fill="%s" stroke="%s" stroke-width="1.5"><title>goal %s %s</title></path>`+"\n",
				tx, mid-barH/2-1, tx, mid-barH/2-1, barH+2, colorText, colorText, op, FormatRatio(r.Target))
		}
		b.WriteString(label + "\n")
	}
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="1.5" stroke-dasharray="5 3"/>`+"\n", one, top-10, one, bottom, colorText)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="11" fill="%s">1.0 = %s</text>`+"\n", one, top-14, colorText, esc(base))
	legendY := bottom + 38
	good, bad := "faster", "slower"
	if !higherBetter {
		good, bad = "uses less", "uses more"
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="10" fill="%s"/><text x="%d" y="%d" font-size="11" fill="%s">Sprout %s</text>`+"\n", chartLeft, legendY-9, colorGood, chartLeft+16, legendY, colorSubtle, good)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="10" fill="%s"/><text x="%d" y="%d" font-size="11" fill="%s">Sprout %s</text>`+"\n", chartLeft+120, legendY-9, colorBad, chartLeft+136, legendY, colorSubtle, bad)
	fmt.Fprintf(&b, `<path d="M%d %d l-4 -5 h8 z M%d %d v10" fill="%s" stroke="%s" stroke-width="1.5"/><text x="%d" y="%d" font-size="11" fill="%s">goal</text>`+"\n",
		chartLeft+250, legendY-9, chartLeft+250, legendY-9, colorText, colorText, chartLeft+258, legendY, colorSubtle)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" font-size="11" fill="%s">log scale</text>`+"\n", chartWidth-chartRight, legendY, colorSubtle)
	b.WriteString("</svg>\n")
	return b.String()
}

// tickRatio labels a ratio axis tick: 0.25×, 1×, 16×; 1/32× below that.
func tickRatio(v float64) string {
	if v < 0.25 {
		return fmt.Sprintf("1/%.0f×", 1/v)
	}
	return strconv.FormatFloat(v, 'f', -1, 64) + "×"
}

// tickLatency labels a latency axis tick briefly: 10µs, 1ms, 1s.
func tickLatency(v float64) string {
	d := time.Duration(v)
	switch {
	case d >= time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
	case d >= time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64) + "ms"
	case d >= time.Microsecond:
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', -1, 64) + "µs"
	}
	return strconv.FormatFloat(v, 'f', -1, 64) + "ns"
}

// LatencySVG charts each timed scenario's p50, p99 and p99.9 on both
// servers, on a logarithmic axis.
func LatencySVG(outs []Outcome, base, cand string) string {
	type group struct {
		name   string
		sb, sc Summary
	}
	var groups []group
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, o := range outs {
		if !o.Scenario.timed() {
			continue
		}
		g := group{o.Scenario.Name, Summarize(o.Runs[base]), Summarize(o.Runs[cand])}
		for _, s := range []Summary{g.sb, g.sc} {
			if s.OK && s.P50 > 0 {
				lo = math.Min(lo, float64(s.P50))
				hi = math.Max(hi, float64(s.P999))
			}
		}
		groups = append(groups, g)
	}
	if math.IsInf(lo, 0) {
		lo, hi = float64(10*time.Microsecond), float64(time.Millisecond)
	}
	lo = math.Pow(10, math.Floor(math.Log10(lo)))
	hi = math.Pow(10, math.Ceil(math.Log10(math.Max(hi, lo*10))))
	plotW := float64(chartWidth - chartLeft - chartRight)
	x := func(v float64) float64 {
		v = math.Max(lo, math.Min(v, hi))
		return chartLeft + (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*plotW
	}

	const barH, gap, groupGap = 11, 3, 12
	groupH := 2*barH + gap + groupGap
	top := chartTop + 14
	bottom := top + len(groups)*groupH
	height := bottom + 60

	var b strings.Builder
	svgOpen(&b, height, "Latency: p50, p99 and p99.9 (lower is better)",
		"log scale; bar to p99, white tick at p50, whisker to p99.9; median of alternating runs")
	for d := lo; d <= hi*1.0001; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := d * m
			if v > hi*1.0001 {
				break
			}
			stroke := colorGrid
			if m == 1 {
				stroke = "#bdbdbd"
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x(v), top-6, x(v), bottom, stroke)
			if m == 1 || (x(hi)-x(lo))/math.Log10(hi/lo) > 240 { // label 2 and 5 only when a decade is wide
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="10" fill="%s">%s</text>`+"\n", x(v), bottom+15, colorSubtle, tickLatency(v))
			}
		}
	}
	for i, g := range groups {
		y := top + i*groupH
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" font-size="12" fill="%s">%s</text>`+"\n", chartLeft-8, y+barH+gap/2+4, colorText, esc(g.name))
		for k, s := range []Summary{g.sb, g.sc} {
			ry := y + k*(barH+gap)
			name, color := base, colorBase
			if k == 1 {
				name, color = cand, colorGood
			}
			if !s.OK {
				fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" font-style="italic" fill="%s">%s: %s</text>`+"\n", chartLeft+6, ry+barH-2, colorSubtle, esc(name), esc(cell(s, nil)))
				continue
			}
			p50, p99, p999 := x(float64(s.P50)), x(float64(s.P99)), x(float64(s.P999))
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s %s: p50 %s, p99 %s, p99.9 %s</title></rect>`+"\n",
				chartLeft, ry, p99-chartLeft, barH, color, esc(g.name), esc(name), FormatLatency(s.P50), FormatLatency(s.P99), FormatLatency(s.P999))
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="white" stroke-width="2"/>`+"\n", p50, ry+1, p50, ry+barH-1)
			fmt.Fprintf(&b, `<path d="M%.1f %d H%.1f M%.1f %d v%d" stroke="%s" stroke-width="1.2" fill="none"/>`+"\n",
				p99, ry+barH/2, p999, p999, ry+2, barH-4, color)
			fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="%s">p99 %s</text>`+"\n", chartWidth-chartRight+8, ry+barH-2, colorSubtle, FormatLatency(s.P99))
		}
	}
	legendY := bottom + 40
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="10" fill="%s"/><text x="%d" y="%d" font-size="11" fill="%s">%s</text>`+"\n", chartLeft, legendY-9, colorBase, chartLeft+16, legendY, colorSubtle, esc(base))
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="10" fill="%s"/><text x="%d" y="%d" font-size="11" fill="%s">%s</text>`+"\n", chartLeft+120, legendY-9, colorGood, chartLeft+136, legendY, colorSubtle, esc(cand))
	b.WriteString("</svg>\n")
	return b.String()
}

func svgOpen(b *strings.Builder, height int, title, subtitle string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s>`+"\n",
		chartWidth, height, chartWidth, height, chartFont)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(b, `<text x="16" y="26" font-size="16" font-weight="bold" fill="%s">%s</text>`+"\n", colorText, esc(title))
	fmt.Fprintf(b, `<text x="16" y="44" font-size="12" fill="%s">%s</text>`+"\n", colorSubtle, esc(subtitle))
}

func esc(s string) string { return html.EscapeString(s) }
