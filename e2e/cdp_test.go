// The console tests drive a headless Chromium through the DevTools protocol
// over --remote-debugging-pipe (file descriptors 3 and 4, messages ended
// by a NUL byte), with the standard library only. It does what the console
// tests need: open a page, evaluate JavaScript, set headers, screenshot.
package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// findChromium returns the Chromium binary: $CHROMIUM, else chromium or
// chromium-browser on PATH.
func findChromium() (string, error) {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p, nil
	}
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no Chromium found (set CHROMIUM, or install it: apt-get update && apt-get install -y chromium; `make chromium` does that)")
}

// cdpBrowser is a running headless Chromium.
type cdpBrowser struct {
	cmd     *exec.Cmd
	w       *os.File
	mu      sync.Mutex
	next    int
	pending map[int]chan cdpMessage
	done    chan struct{}
	dir     string
}

type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    any             `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// launchChromium starts a headless Chromium (bin) with a fresh profile.
func launchChromium(bin string, width, height int) (*cdpBrowser, error) {
	dir, err := os.MkdirTemp("", "ojs-chromium-")
	if err != nil {
		return nil, err
	}
	inR, inW, err := os.Pipe() // we write, Chromium reads (fd 3)
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe() // Chromium writes (fd 4), we read
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
		"--remote-debugging-pipe", "--user-data-dir="+dir, fmt.Sprintf("--window-size=%d,%d", width, height), "about:blank")
	cmd.ExtraFiles = []*os.File{inR, outW}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	inR.Close()
	outW.Close()
	b := &cdpBrowser{cmd: cmd, w: inW, pending: map[int]chan cdpMessage{}, done: make(chan struct{}), dir: dir}
	go b.read(outR)
	return b, nil
}

func (b *cdpBrowser) read(f *os.File) {
	defer close(b.done)
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		raw, err := r.ReadBytes(0)
		if err != nil {
			return
		}
		var m cdpMessage
		if json.Unmarshal(raw[:len(raw)-1], &m) != nil || m.ID == 0 {
			continue // events are not needed
		}
		b.mu.Lock()
		ch := b.pending[m.ID]
		delete(b.pending, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

// Call sends one command (to a page when session is set) and decodes its
// result into out (may be nil).
func (b *cdpBrowser) Call(ctx context.Context, session, method string, params, out any) error {
	b.mu.Lock()
	b.next++
	id := b.next
	ch := make(chan cdpMessage, 1)
	b.pending[id] = ch
	raw, err := json.Marshal(cdpMessage{ID: id, Method: method, Params: params, SessionID: session})
	if err == nil {
		_, err = b.w.Write(append(raw, 0))
	}
	b.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return fmt.Errorf("%s: %s", method, m.Error.Message)
		}
		if out != nil {
			return json.Unmarshal(m.Result, out)
		}
		return nil
	case <-b.done:
		return fmt.Errorf("%s: the browser exited", method)
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// Close stops the browser and removes its profile.
func (b *cdpBrowser) Close() {
	_ = b.Call(context.Background(), "", "Browser.close", nil, nil)
	select {
	case <-b.done:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
	}
	_ = b.cmd.Wait()
	b.w.Close()
	os.RemoveAll(b.dir)
}

// cdpPage is one tab.
type cdpPage struct {
	b       *cdpBrowser
	session string
}

// NewPage opens a tab; headers (e.g. Authorization) are sent with every
// request it makes.
func (b *cdpBrowser) NewPage(ctx context.Context, headers map[string]string) (*cdpPage, error) {
	var t struct {
		TargetID string `json:"targetId"`
	}
	if err := b.Call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &t); err != nil {
		return nil, err
	}
	var s struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.Call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": t.TargetID, "flatten": true}, &s); err != nil {
		return nil, err
	}
	p := &cdpPage{b: b, session: s.SessionID}
	for _, m := range []string{"Page.enable", "Runtime.enable", "Network.enable"} {
		if err := b.Call(ctx, p.session, m, nil, nil); err != nil {
			return nil, err
		}
	}
	if len(headers) > 0 {
		if err := b.Call(ctx, p.session, "Network.setExtraHTTPHeaders", map[string]any{"headers": headers}, nil); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Navigate loads url and waits until the document has loaded.
func (p *cdpPage) Navigate(ctx context.Context, url string) error {
	var r struct {
		ErrorText string `json:"errorText"`
	}
	if err := p.b.Call(ctx, p.session, "Page.navigate", map[string]any{"url": url}, &r); err != nil {
		return err
	}
	if r.ErrorText != "" {
		return fmt.Errorf("navigate %s: %s", url, r.ErrorText)
	}
	return p.WaitLoaded(ctx, url)
}

// WaitLoaded waits until the page shows a URL starting with prefix (""
// for any) and its document is complete.
func (p *cdpPage) WaitLoaded(ctx context.Context, prefix string) error {
	for {
		var state struct {
			URL, Ready string
		}
		err := p.Eval(ctx, `({URL: location.href, Ready: document.readyState})`, &state)
		if err == nil && state.Ready == "complete" && strings.HasPrefix(state.URL, prefix) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("page did not load %s: %w (last: %+v, %v)", prefix, ctx.Err(), state, err)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// Eval evaluates a JavaScript expression in the page and decodes its
// (JSON-serialisable) value into out.
func (p *cdpPage) Eval(ctx context.Context, expr string, out any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception *struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := p.b.Call(ctx, p.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r); err != nil {
		return err
	}
	if e := r.ExceptionDetails; e != nil {
		msg := e.Text
		if e.Exception != nil {
			msg += " " + e.Exception.Description
		}
		return fmt.Errorf("evaluate: %s", msg)
	}
	if out == nil || len(r.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(r.Result.Value, out)
}

// Screenshot captures the whole page as PNG.
func (p *cdpPage) Screenshot(ctx context.Context) ([]byte, error) {
	var r struct {
		Data string `json:"data"`
	}
	if err := p.b.Call(ctx, p.session, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &r); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(r.Data)
}
