package hostbench

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Progress is one line on a terminal that says what a long command is
// doing: each step replaces it, a ticker adds the seconds the step has
// taken, and Done clears it, so that the command's output is left as it
// would be without. A nil *Progress says nothing; its methods may be
// called from one goroutine.
type Progress struct {
	w    io.Writer
	name string

	mu    sync.Mutex
	what  string
	start time.Time

	stop chan struct{}
	wg   sync.WaitGroup
}

// Step shows what as what the command does now.
func (p *Progress) Step(what string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.what, p.start = what, time.Now()
	p.drawLocked()
	p.mu.Unlock()
	if p.stop == nil {
		p.stop = make(chan struct{})
		p.wg.Add(1)
		go p.tick()
	}
}

// tick redraws the line every second until Done.
func (p *Progress) tick() {
	defer p.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			p.drawLocked()
			p.mu.Unlock()
		}
	}
}

// drawLocked writes the line over the one before: a carriage return, the
// erase-line sequence, the text.
func (p *Progress) drawLocked() {
	line := fmt.Sprintf("\r\x1b[K%s: %s...", p.name, p.what)
	if s := int(time.Since(p.start).Seconds()); s > 0 {
		line += fmt.Sprintf(" %ds", s)
	}
	io.WriteString(p.w, line)
}

// Done stops the ticker and clears the line.
func (p *Progress) Done() {
	if p == nil {
		return
	}
	if p.stop != nil {
		close(p.stop)
		p.wg.Wait()
		p.stop = nil
	}
	io.WriteString(p.w, "\r\x1b[K")
}

// NewProgress returns the progress line of the command name on w, a
// terminal: the caller decides whether there is one.
func NewProgress(w io.Writer, name string) *Progress { return &Progress{w: w, name: name} }
