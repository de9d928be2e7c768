// Command nmeter is the part of busybox's nmeter applet that the upstream
// e2e suites use, for the e2e busybox image (test/conformance/images):
// Debian's busybox-static has no nmeter, and the node suite's container
// lifecycle specs take millisecond timestamps from `nmeter -d0 '%3t'`.
//
//	nmeter [-d MSEC] FORMAT
//
// prints FORMAT every MSEC milliseconds (default 1000; 0 as fast as it can;
// a negative delay prints once). FORMAT is text with %[N]t, the local time
// HH:MM:SS with N digits of the second's fraction (0 to 6), and %% for a %.
// Any other % directive is refused: this is not busybox's whole applet.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "nmeter:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	delay := time.Second
	for len(args) > 1 {
		switch {
		case args[0] == "-d" && len(args) > 2:
			ms, err := strconv.Atoi(args[1])
			if err != nil {
				return fmt.Errorf("-d %q: %w", args[1], err)
			}
			delay, args = time.Duration(ms)*time.Millisecond, args[2:]
		case strings.HasPrefix(args[0], "-d"):
			ms, err := strconv.Atoi(args[0][2:])
			if err != nil {
				return fmt.Errorf("%q: %w", args[0], err)
			}
			delay, args = time.Duration(ms)*time.Millisecond, args[1:]
		default:
			return errors.New("usage: nmeter [-d MSEC] FORMAT")
		}
	}
	if len(args) != 1 {
		return errors.New("usage: nmeter [-d MSEC] FORMAT")
	}
	parts, err := parse(args[0])
	if err != nil {
		return err
	}
	w := bufio.NewWriter(os.Stdout)
	for {
		if _, err := w.WriteString(render(parts, time.Now()) + "\n"); err != nil {
			return nil // the reader left (head -n1): done
		}
		if err := w.Flush(); err != nil {
			return nil
		}
		if delay < 0 {
			return nil
		}
		time.Sleep(delay)
	}
}

// part is literal text, or a time with digits >= 0.
type part struct {
	text   string
	digits int // -1: text
}

func parse(format string) ([]part, error) {
	var parts []part
	var lit strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			lit.WriteByte(c)
			continue
		}
		j := i + 1
		for j < len(format) && format[j] >= '0' && format[j] <= '9' {
			j++
		}
		if j == len(format) {
			return nil, fmt.Errorf("format %q ends inside a directive", format)
		}
		switch {
		case format[j] == '%' && j == i+1:
			lit.WriteByte('%')
		case format[j] == 't':
			n := 0
			if j > i+1 {
				n, _ = strconv.Atoi(format[i+1 : j])
			}
			if n > 6 {
				n = 6
			}
			if lit.Len() > 0 {
				parts = append(parts, part{text: lit.String(), digits: -1})
				lit.Reset()
			}
			parts = append(parts, part{digits: n})
		default:
			return nil, fmt.Errorf("format directive %%%s is not supported (only %%[N]t and %%%%)", format[i+1:j+1])
		}
		i = j
	}
	if lit.Len() > 0 {
		parts = append(parts, part{text: lit.String(), digits: -1})
	}
	return parts, nil
}

func render(parts []part, now time.Time) string {
	var b strings.Builder
	for _, p := range parts {
		if p.digits < 0 {
			b.WriteString(p.text)
			continue
		}
		b.WriteString(now.Format("15:04:05"))
		if p.digits > 0 {
			frac := fmt.Sprintf("%09d", now.Nanosecond())[:p.digits]
			b.WriteString("." + frac)
		}
	}
	return b.String()
}
