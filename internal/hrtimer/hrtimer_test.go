package hrtimer

import (
	"testing"
	"time"
)

func TestSleepUntilNeverWakesEarly(t *testing.T) {
	tm, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	for _, d := range []time.Duration{0, 50 * time.Microsecond, 300 * time.Microsecond, 2 * time.Millisecond} {
		at := time.Now().Add(d)
		if !tm.SleepUntil(at) {
			t.Fatalf("%s: interrupted", d)
		}
		if now := time.Now(); now.Before(at) {
			t.Fatalf("%s: woke %s early", d, at.Sub(now))
		}
	}
	if !tm.SleepUntil(time.Now().Add(-time.Second)) {
		t.Fatal("a time past: want an immediate wake")
	}
}

func TestInterruptEndsEverySleep(t *testing.T) {
	tm, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	done := make(chan bool)
	go func() { done <- tm.SleepUntil(time.Now().Add(time.Hour)) }()
	time.Sleep(10 * time.Millisecond)
	tm.Interrupt()
	select {
	case ok := <-done:
		if ok {
			t.Fatal("an interrupted sleep reported a wake")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Interrupt did not end the sleep")
	}
	if tm.SleepUntil(time.Now().Add(time.Hour)) {
		t.Fatal("a sleep after Interrupt slept")
	}
}
