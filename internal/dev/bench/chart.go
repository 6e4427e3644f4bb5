package bench

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Segment is one part of a stacked bar.
type Segment struct {
	Label string
	Value float64
	Color color.RGBA
}

// Bar is one row of a panel: stacked segments with a text after them.
type Bar struct {
	Label    string
	Segments []Segment
	Text     string
}

// Panel is a horizontal bar chart with a title.
type Panel struct {
	Title string
	Bars  []Bar
}

var (
	colDynamoDB = color.RGBA{0x3b, 0x6e, 0xc4, 0xff}
	colSQS      = color.RGBA{0xe8, 0x8a, 0x1a, 0xff}
	colLambda   = color.RGBA{0x3c, 0xa0, 0x5a, 0xff}
	colAPI      = color.RGBA{0x88, 0x88, 0x88, 0xff}
	colEvents   = color.RGBA{0xb0, 0x4a, 0xa8, 0xff}
	colMain     = color.RGBA{0x3b, 0x6e, 0xc4, 0xff}
	colP99      = color.RGBA{0xc4, 0x4b, 0x3b, 0xff}
	colText     = color.RGBA{0x20, 0x20, 0x20, 0xff}
	colGrid     = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
)

// Panels builds the chart's panels from a result: throughput, AWS
// requests per unit by service, enqueue-to-start latency, and the cost per
// million units by service beside Step Functions.
func (r *Result) Panels() []Panel {
	tp := Panel{Title: "Throughput, end to end (units per second; a unit is a job or a workflow step)"}
	req := Panel{Title: "AWS requests per unit: DynamoDB (blue), SQS (orange), Lambda invocations (green), EventBridge events (purple)"}
	lat := Panel{Title: "Enqueue to start, ms: p50 (blue), p99 (red)"}
	cost := Panel{Title: "$ per million units: DynamoDB (blue), SQS (orange), Lambda (green), API Gateway (grey), EventBridge (purple)"}
	for _, p := range r.Phases {
		tp.Bars = append(tp.Bars, Bar{Label: p.Name, Segments: []Segment{{Value: p.UnitsPerSecond, Color: colMain}},
			Text: fmt.Sprintf("%s %s/s", num(p.UnitsPerSecond), p.Unit)})
		req.Bars = append(req.Bars, Bar{Label: p.Name, Segments: []Segment{
			{Value: p.PerUnit.DynamoDB, Color: colDynamoDB}, {Value: p.PerUnit.SQS, Color: colSQS},
			{Value: p.PerUnit.Lambda, Color: colLambda}, {Value: p.PerUnit.EventBridgeEvents, Color: colEvents}},
			Text: fmt.Sprintf("%s / %s / %s / %s", num(p.PerUnit.DynamoDB), num(p.PerUnit.SQS), num(p.PerUnit.Lambda), num(p.PerUnit.EventBridgeEvents))})
		lat.Bars = append(lat.Bars, Bar{Label: p.Name + " p50", Segments: []Segment{{Value: p.EnqueueToStart.P50, Color: colMain}}, Text: num(p.EnqueueToStart.P50) + " ms"},
			Bar{Label: p.Name + " p99", Segments: []Segment{{Value: p.EnqueueToStart.P99, Color: colP99}}, Text: num(p.EnqueueToStart.P99) + " ms"})
		c := p.Cost
		cost.Bars = append(cost.Bars, Bar{Label: p.Name, Segments: []Segment{
			{Value: c.DynamoDB, Color: colDynamoDB}, {Value: c.SQS, Color: colSQS}, {Value: c.LambdaRequests + c.LambdaCompute, Color: colLambda},
			{Value: c.APIGateway, Color: colAPI}, {Value: c.EventBridge, Color: colEvents}},
			Text: "$" + num(c.Total)})
	}
	if sf := r.StepFunctions; sf.StandardPerMillionSteps > 0 {
		cost.Bars = append(cost.Bars,
			Bar{Label: "Step Functions Standard", Segments: []Segment{{Value: sf.StandardPerMillionSteps, Color: colP99}}, Text: "$" + num(sf.StandardPerMillionSteps) + " per step"},
			Bar{Label: "Step Functions Express", Segments: []Segment{{Value: sf.ExpressPerMillionSteps, Color: colP99}}, Text: "$" + num(sf.ExpressPerMillionSteps) + " per step"})
	}
	return []Panel{tp, req, lat, cost}
}

// DrawPNG renders the panels one above the other as a PNG.
func DrawPNG(w io.Writer, title string, panels []Panel) error {
	const (
		width   = 1000
		rowH    = 18
		labelW  = 190
		textW   = 190
		pad     = 12
		titleH  = 30
		headerH = 24
	)
	height := titleH + pad
	for _, p := range panels {
		height += headerH + rowH*len(p.Bars) + pad
	}
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	text(img, pad, 20, title, colText)
	y := titleH + pad
	barW := width - labelW - textW - 2*pad
	for _, p := range panels {
		text(img, pad, y+14, p.Title, colText)
		y += headerH
		maxV := 0.0
		for _, b := range p.Bars {
			t := 0.0
			for _, s := range b.Segments {
				t += s.Value
			}
			maxV = max(maxV, t)
		}
		x0 := pad + labelW
		fill(img, image.Rect(x0, y, x0+1, y+rowH*len(p.Bars)), colGrid)
		for i, b := range p.Bars {
			ry := y + i*rowH
			text(img, pad, ry+13, b.Label, colText)
			x := x0
			for _, s := range b.Segments {
				wpx := 0
				if maxV > 0 {
					wpx = int(s.Value / maxV * float64(barW))
				}
				fill(img, image.Rect(x, ry+3, x+wpx, ry+rowH-3), s.Color)
				x += wpx
			}
			text(img, x+6, ry+13, b.Text, colText)
		}
		y += rowH*len(p.Bars) + pad
	}
	return png.Encode(w, img)
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	draw.Draw(img, r, &image.Uniform{C: c}, image.Point{}, draw.Src)
}

func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	(&font.Drawer{Dst: img, Src: &image.Uniform{C: c}, Face: basicfont.Face7x13, Dot: fixed.P(x, y)}).DrawString(s)
}
