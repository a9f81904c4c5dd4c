package devicecheck

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// plotRow is one row of the chart: what fraction of its floor a row
// reached (the floor's time over the row's, 1 on the roofline of the
// run's copy bandwidth and matmul peak), torch's on the same shape (0:
// none), and what the row reached in its own units.
type plotRow struct {
	section, name, reached string
	ofFloor, torchOfFloor  float64
}

// plotRows are the rows of r the chart draws, section by section: the
// decode rows against the larger of their bytes over the copy bandwidth
// and their FLOPs over the matmul peak, the prefill rows against their
// FLOPs over the peak, the sparse and FP8 rows against theirs, and
// merge_state against the copy bandwidth. Rows that failed are left out.
func (r *Report) plotRows() []plotRow {
	var rows []plotRow
	for _, d := range r.Decode {
		if d.Error != "" || d.US <= 0 || d.FloorUS <= 0 {
			continue
		}
		row := plotRow{section: "decode and extend", name: d.Name, ofFloor: d.FloorUS / d.US,
			reached: fmt.Sprintf("%.1f us, %.2f TB/s, %.0f TFLOP/s", d.US, d.TBs, d.TFLOPs)}
		if d.TorchUS > 0 {
			row.torchOfFloor = d.FloorUS / d.TorchUS
		}
		rows = append(rows, row)
	}
	for _, p := range r.Prefill {
		if p.Error != "" || p.US <= 0 {
			continue
		}
		row := plotRow{section: "prefill", name: p.Name, ofFloor: p.OfMatmul,
			reached: fmt.Sprintf("%.1f us, %.0f TFLOP/s", p.US, p.TFLOPs)}
		if p.TorchUS > 0 {
			row.torchOfFloor = p.OfMatmul * p.US / p.TorchUS
		}
		rows = append(rows, row)
	}
	for _, q := range r.Quant {
		if q.Error != "" || q.US <= 0 || r.Floors.CopyTBs <= 0 || r.Floors.MatmulTFLOPs <= 0 {
			continue
		}
		floor := math.Max(q.Bytes/(r.Floors.CopyTBs*1e6), q.FLOPs/(r.Floors.MatmulTFLOPs*1e6))
		rows = append(rows, plotRow{section: "sparse and FP8", name: q.Name, ofFloor: floor / q.US,
			reached: fmt.Sprintf("%.1f us, %.2f TB/s, %.0f TFLOP/s", q.US, q.TBs, q.TFLOPs)})
	}
	if m := r.Merge; m != nil && m.Error == "" && m.US > 0 {
		rows = append(rows, plotRow{section: "merge_state", name: "merge_state", ofFloor: m.OfCopy,
			reached: fmt.Sprintf("%.1f us, %.2f TB/s", m.US, m.TBs)})
	}
	return rows
}

// The chart's geometry, in SVG user units.
const (
	plotLabelW   = 220 // the rows' names
	plotBarW     = 520 // 100% of the floor
	plotTextW    = 300 // what a row reached
	plotRowH     = 16
	plotHeadH    = 70
	plotSectionH = 22
)

// WriteSVG draws r as an SVG chart: every row as a bar of the fraction of
// its floor it reached (the roofline of the run's copy bandwidth and
// matmul peak: 100% is the floor), torch's fraction on the same shape as a
// mark beside it, each row's time and rates at its end; the device, the
// floors and the time of the run in its title.
func (r *Report) WriteSVG(w io.Writer) error {
	rows := r.plotRows()
	if len(rows) == 0 {
		return fmt.Errorf("the report has no row to draw")
	}
	sections := 0
	for i, row := range rows {
		if i == 0 || row.section != rows[i-1].section {
			sections++
		}
	}
	// Bars are drawn up to 120% of the floor (a measured copy bandwidth
	// is not the device's peak); the rows' figures follow.
	textX := plotLabelW + plotBarW*6/5 + 10
	width := textX + plotTextW
	height := plotHeadH + sections*plotSectionH + len(rows)*plotRowH + 30
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="14" font-weight="bold">attnplug bench --gpu: each row against its floor</text>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="38">%s, %s: copy %.2f TB/s, bf16 matmul %.0f TFLOP/s (the floors, measured in the same run). Bar: the floor's time over the row's; mark: torch's on the same shape.</text>`+"\n",
		html.EscapeString(r.Floors.Device), html.EscapeString(r.When), r.Floors.CopyTBs, r.Floors.MatmulTFLOPs)
	x0 := plotLabelW
	top := plotHeadH - 12
	bottom := height - 24
	for _, pct := range []int{0, 25, 50, 75, 100} {
		x := x0 + plotBarW*pct/100
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#ccc"/>`+"\n", x, top, x, bottom)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#666">%d%%</text>`+"\n", x, bottom+14, pct)
	}
	y := plotHeadH
	for i, row := range rows {
		if i == 0 || row.section != rows[i-1].section {
			y += plotSectionH
			fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y-6, html.EscapeString(row.section))
		}
		bar := int(math.Round(float64(plotBarW) * math.Min(row.ofFloor, 1.2)))
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", x0-6, y+11, html.EscapeString(row.name))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#3b7dd8"/>`+"\n", x0, y+2, bar, plotRowH-4)
		if row.torchOfFloor > 0 {
			tx := x0 + int(math.Round(float64(plotBarW)*math.Min(row.torchOfFloor, 1.2)))
			fmt.Fprintf(&b, `<path d="M%d %d l4 5 l-4 5 l-4 -5 z" fill="#e0761b"><title>torch: %.0f%%</title></path>`+"\n",
				tx, y+3, 100*row.torchOfFloor)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d">%.0f%%  %s</text>`+"\n", textX, y+11, 100*row.ofFloor, html.EscapeString(row.reached))
		y += plotRowH
	}
	fmt.Fprintf(&b, `<path d="M%d %d l4 5 l-4 5 l-4 -5 z" fill="#e0761b"/><text x="%d" y="%d" fill="#666">torch</text>`+"\n",
		textX+4, bottom+5, textX+12, bottom+14)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
