package trtllm

import (
	"os"
	"testing"

	"github.com/kvferry/kvferry/internal/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.VerifyNoLeaks(m)) }
