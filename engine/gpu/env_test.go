package gpu_test

import (
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/internal/hostenv"
)

// TestConfigFromEnv reads GPU support's variables, within their bounds.
func TestConfigFromEnv(t *testing.T) {
	env := func(m map[string]string) hostenv.Env {
		return func(name string) (string, bool) { v, ok := m[name]; return v, ok }
	}
	assert.DeepEqual(t, gpu.ConfigFromEnv(env(nil)), gpu.Config{})
	c := gpu.ConfigFromEnv(env(map[string]string{
		"KVFERRY_CUDA_LIB": "/x/libcuda.so.1", "KVFERRY_CUDA": "0", "KVFERRY_CUDA_STREAMS": "8",
		"KVFERRY_GPU_STAGE_BYTES": "65536", "KVFERRY_GPU_STAGE_DEPTH": "65",
	}))
	assert.DeepEqual(t, c, gpu.Config{Library: "/x/libcuda.so.1", Disabled: true, Streams: 8, StagePieceBytes: 65536})
	// On, and a stage below 4 KiB keeps the default.
	c = gpu.ConfigFromEnv(env(map[string]string{"KVFERRY_CUDA": "1", "KVFERRY_GPU_STAGE_BYTES": "1024"}))
	assert.DeepEqual(t, c, gpu.Config{})
	c = gpu.ConfigFromEnv(env(map[string]string{"KVFERRY_HIP_LIB": "/x/libamdhip64.so", "KVFERRY_GPU_RUNTIME": "HIP"}))
	assert.DeepEqual(t, c, gpu.Config{HIPLibrary: "/x/libamdhip64.so", Runtime: gpu.HIP})
	c = gpu.ConfigFromEnv(env(map[string]string{"KVFERRY_GPU_RUNTIME": "ascend"}))
	assert.DeepEqual(t, c, gpu.Config{})
}
