package local

import "github.com/kvferry/kvferry/engine"

// SetCopyHook makes t copy at most pieceBytes per C call (0: unchanged)
// and run f before each call with the slices it copies. Call it before
// any Submit.
func SetCopyHook(t *Transport, pieceBytes uint64, f func(slices []*engine.Slice)) {
	if pieceBytes > 0 {
		t.pieceBytes = pieceBytes
	}
	t.beforeCopy = f
}
