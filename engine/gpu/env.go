package gpu

import "github.com/kvferry/kvferry/internal/hostenv"

// ConfigFromEnv reads GPU support's settings from env (hostenv.Lookup in
// the library, the C getenv):
//
//	KVFERRY_CUDA_LIB         CUDA driver to load (default libcuda.so.1)
//	KVFERRY_HIP_LIB          HIP runtime to load (default libamdhip64.so)
//	KVFERRY_GPU_RUNTIME      "cuda" or "hip" forces the GPU runtime (default:
//	                         the one present; another value is ignored)
//	KVFERRY_CUDA             "0" turns GPU memory support off
//	KVFERRY_CUDA_STREAMS     streams of each device's copier (1-64)
//	KVFERRY_GPU_STAGE_BYTES  pinned bounce buffer size (4 KiB - 64 MiB)
//	KVFERRY_GPU_STAGE_DEPTH  pinned bounce buffers per stager (1-64)
func ConfigFromEnv(env hostenv.Env) Config {
	var g Config
	if v, ok := env.Str("KVFERRY_CUDA_LIB"); ok {
		g.Library = v
	}
	if v, ok := env.Str("KVFERRY_HIP_LIB"); ok {
		g.HIPLibrary = v
	}
	if v, ok := env.Str("KVFERRY_GPU_RUNTIME"); ok {
		if k, err := ParseKind(v); err == nil {
			g.Runtime = k
		}
	}
	if _, ok := env.Str("KVFERRY_CUDA"); ok && !env.Flag("KVFERRY_CUDA") {
		g.Disabled = true
	}
	if n, ok := env.Int("KVFERRY_CUDA_STREAMS"); ok && n > 0 && n <= 64 {
		g.Streams = int(n)
	}
	if n, ok := env.Int("KVFERRY_GPU_STAGE_BYTES"); ok && n >= 4096 && n <= 64<<20 {
		g.StagePieceBytes = uint64(n)
	}
	if n, ok := env.Int("KVFERRY_GPU_STAGE_DEPTH"); ok && n > 0 && n <= 64 {
		g.StageDepth = int(n)
	}
	return g
}
