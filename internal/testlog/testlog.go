// Package testlog holds what tests need to read what a server logs or
// prints while its goroutines still run.
package testlog

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer that goroutines may write while a test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Count returns how many times s was written so far.
func (l *Buffer) Count(s string) int { return strings.Count(l.String(), s) }
