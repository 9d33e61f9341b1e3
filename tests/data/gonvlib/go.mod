module local/gonvlib

go 1.25.0

require (
	github.com/NVIDIA/go-nvlib v0.12.0
	github.com/NVIDIA/go-nvml v0.13.3-1
)

require github.com/google/uuid v1.6.0 // indirect
