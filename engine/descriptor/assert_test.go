package descriptor

import (
	"fmt"
	"reflect"
	"testing"
)

// The package's tests use these few checks instead of gotest.tools: with
// the standard library only in the test binary, the fuzz targets run
// several times faster (Go's fuzzer resets every linked package's
// coverage counters after each execution).

func report(t testing.TB, what string, msg []any) {
	t.Helper()
	if len(msg) > 0 {
		if f, ok := msg[0].(string); ok {
			what += ": " + fmt.Sprintf(f, msg[1:]...)
		} else {
			what += ": " + fmt.Sprint(msg...)
		}
	}
	t.Fatal(what)
}

func nilErr(t testing.TB, err error, msg ...any) {
	t.Helper()
	if err != nil {
		report(t, "error: "+err.Error(), msg)
	}
}

func eq(t testing.TB, got, want any, msg ...any) {
	t.Helper()
	if got != want {
		report(t, fmt.Sprintf("got %#v, want %#v", got, want), msg)
	}
}

func deepEq(t testing.TB, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		report(t, fmt.Sprintf("got %+v, want %+v", got, want), nil)
	}
}

func check(t testing.TB, cond bool, msg ...any) {
	t.Helper()
	if !cond {
		report(t, "assertion failed", msg)
	}
}
