package web

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mesh-host/mesh-host/cmd/internal/fleetview"
	"github.com/mesh-host/mesh-host/cmd/meshctl/rollout"
)

// The pictures are drawn by the templates as SVG; this file computes
// their geometry, so that the templates hold only numbers and text, each
// escaped where it lands.

// barChart is a horizontal bar a row: the versions across the fleet.
type barChart struct {
	Width, Height int
	Bars          []bar
}

type bar struct {
	Label       string
	N           int
	Y, W, TextY int
}

const (
	barLabelWidth = 190
	barMaxWidth   = 260
	barRow        = 22
	maxLabelRunes = 32
)

func versionChart(versions []fleetview.Count, total int) barChart {
	shown := versions
	var rest int
	if len(shown) > maxVersionBars {
		for _, c := range shown[maxVersionBars-1:] {
			rest += c.N
		}
		shown = append(shown[:maxVersionBars-1:maxVersionBars-1], fleetview.Count{Name: "other versions", N: rest})
	}
	c := barChart{Width: barLabelWidth + barMaxWidth + 60, Height: max(1, len(shown)) * barRow}
	for i, v := range shown {
		w := 0
		if total > 0 {
			w = max(1, v.N*barMaxWidth/total)
		}
		c.Bars = append(c.Bars, bar{Label: clipRunes(v.Name, maxLabelRunes), N: v.N, Y: i*barRow + 3, W: w, TextY: i*barRow + 16})
	}
	return c
}

// clipRunes cuts s to n runes, marking the cut: a label never pushes the
// bars out of the picture.
func clipRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// driftChart is drift found and repaired per hour: two bars an hour.
type driftChart struct {
	Width, Height, Base int
	Hours               []driftHour
	Ticks               []tick
	Max                 int
	Found, Repaired     int
	// Nodes is how many nodes it covers, Read how many records it read;
	// Capped says it read the latest maxDriftRecords only, From on.
	Nodes, Read int
	Capped      bool
	From        time.Time
	Since       time.Time
	Problem     string
}

type driftHour struct {
	Label                      string
	Found, Repaired            int
	X, RX, W                   int
	FoundY, FoundH, RepY, RepH int
}

type tick struct {
	X     int
	Label string
}

const (
	driftSlot   = 20
	driftBar    = 8
	driftHeight = 100
	driftLeft   = 30
)

func newDriftChart(first time.Time, found, repaired []int) driftChart {
	c := driftChart{Width: driftLeft + len(found)*driftSlot + 10, Height: driftHeight + 30, Base: driftHeight + 5, Since: first}
	for i := range found {
		c.Max = max(c.Max, found[i], repaired[i])
		c.Found += found[i]
		c.Repaired += repaired[i]
	}
	scale := func(n int) int {
		if c.Max == 0 || n == 0 {
			return 0
		}
		return max(1, n*driftHeight/c.Max)
	}
	for i := range found {
		at := first.Add(time.Duration(i) * time.Hour).UTC()
		x := driftLeft + i*driftSlot
		h := driftHour{
			Label: at.Format("15:04") + "–" + at.Add(time.Hour).Format("15:04") + " UTC",
			Found: found[i], Repaired: repaired[i], X: x, RX: x + driftBar + 1, W: driftBar,
		}
		h.FoundH, h.RepH = scale(found[i]), scale(repaired[i])
		h.FoundY, h.RepY = c.Base-h.FoundH, c.Base-h.RepH
		c.Hours = append(c.Hours, h)
		if i%6 == 0 {
			c.Ticks = append(c.Ticks, tick{X: x, Label: at.Format("15:04")})
		}
	}
	return c
}

// progress is a wave's (or a rollout's) progress bar: a segment a step,
// in the order they are drawn.
type progress struct {
	Width    int       `json:"width"`
	Segments []segment `json:"segments"`
}

type segment struct {
	Step string `json:"step"`
	N    int    `json:"n"`
	X    int    `json:"x"`
	W    int    `json:"w"`
}

const progressWidth = 400

// progressSteps are the steps in the order a progress bar draws them:
// done first, waiting last.
var progressSteps = []rollout.Step{rollout.StepConverged, rollout.StepUnchanged, rollout.StepReverted, rollout.StepFailed, rollout.StepDeferred, rollout.StepPushed, rollout.StepPending}

// progressOf draws nodes' steps as one bar, every step a segment (zero
// wide when none), so that a script can move them in place.
func progressOf(nodes []rollout.Node) progress {
	counts := map[rollout.Step]int{}
	for _, n := range nodes {
		counts[n.Step]++
	}
	p := progress{Width: progressWidth}
	x := 0
	for i, st := range progressSteps {
		w := 0
		if len(nodes) > 0 {
			w = counts[st] * progressWidth / len(nodes)
		}
		if i == len(progressSteps)-1 || x+w > progressWidth {
			w = max(0, min(w, progressWidth-x))
		}
		p.Segments = append(p.Segments, segment{Step: string(st), N: counts[st], X: x, W: w})
		x += w
	}
	// Rounding leaves a few pixels: the last segment drawn takes them.
	for i := len(p.Segments) - 1; i >= 0 && x < progressWidth && len(nodes) > 0; i-- {
		if p.Segments[i].N > 0 {
			p.Segments[i].W += progressWidth - x
			for j := i + 1; j < len(p.Segments); j++ {
				p.Segments[j].X += progressWidth - x
			}
			break
		}
	}
	return p
}

// stepSummary is a wave's steps as `meshctl rollout status` counts them:
// "2 converged, 1 pending".
func stepSummary(nodes []rollout.Node) string {
	counts := map[rollout.Step]int{}
	for _, n := range nodes {
		counts[n.Step]++
	}
	var parts []string
	for _, st := range []rollout.Step{rollout.StepConverged, rollout.StepUnchanged, rollout.StepPushed, rollout.StepPending, rollout.StepFailed, rollout.StepDeferred, rollout.StepReverted} {
		if counts[st] > 0 {
			parts = append(parts, strconv.Itoa(counts[st])+" "+string(st))
		}
	}
	return strings.Join(parts, ", ")
}
