// Package profile makes a development build of a function write CPU
// profiles: imported (for its side effect) by the functions' files built
// with the ojsdev tag, it profiles the process in windows of
// OJS_CPUPROFILE_WINDOW (default 20s) into OJS_CPUPROFILE_DIR/<name>-<pid>-<n>.pprof
// when OJS_CPUPROFILE_DIR is set (windows, so that a process stopped
// with SIGKILL keeps what it profiled). Binaries built for AWS never link it.
package profile

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"
)

func init() {
	dir := os.Getenv("OJS_CPUPROFILE_DIR")
	if dir == "" {
		return
	}
	window, err := time.ParseDuration(os.Getenv("OJS_CPUPROFILE_WINDOW"))
	if err != nil || window <= 0 {
		window = 20 * time.Second
	}
	name := cmp.Or(os.Getenv("AWS_LAMBDA_FUNCTION_NAME"), filepath.Base(os.Args[0]))
	go func() {
		for n := 0; ; n++ {
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d-%d.pprof", name, os.Getpid(), n)))
			if err != nil {
				return
			}
			if pprof.StartCPUProfile(f) != nil {
				f.Close()
				return
			}
			time.Sleep(window)
			pprof.StopCPUProfile()
			f.Close()
		}
	}()
}
