package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/kvferry/kvferry/engine/transport/rdma"
	"github.com/kvferry/kvferry/engine/transport/rdma/ibv"
	"github.com/kvferry/kvferry/internal/cuda"
)

// hwReport is what kvferry-ctl hw finds on this host: the CUDA driver and
// its devices, the RDMA devices of sysfs and of libibverbs. make hw-check
// reads its JSON to pick the suites to run.
type hwReport struct {
	CUDA hwCUDA `json:"cuda"`
	RDMA hwRDMA `json:"rdma"`
}

type hwCUDA struct {
	// Library is the file opened (KVFERRY_CUDA_LIB, default libcuda.so.1).
	Library string `json:"library"`
	// Available: loaded, cuInit succeeded and at least one device.
	Available bool              `json:"available"`
	Version   int               `json:"version,omitempty"`
	Devices   []cuda.DeviceInfo `json:"devices,omitempty"`
	Error     string            `json:"error,omitempty"`
}

type hwRDMA struct {
	// Sysfs are the entries of /sys/class/infiniband; Verbs the devices
	// ibv_get_device_list returns through Library (KVFERRY_IBVERBS_LIB,
	// default libibverbs.so.1).
	Sysfs   []string `json:"sysfs"`
	Library string   `json:"library"`
	Verbs   []string `json:"verbs"`
	// Available: both list at least one device.
	Available bool           `json:"available"`
	NICs      []rdma.HostNIC `json:"nics,omitempty"`
	Error     string         `json:"error,omitempty"`
}

// probeHW loads the CUDA driver (cuInit, cuDeviceGetCount and each
// device's attributes) and libibverbs (ibv_get_device_list), and reads
// /sys/class/infiniband through rdmamap.
func probeHW() hwReport {
	r := hwReport{RDMA: hwRDMA{Sysfs: []string{}, Verbs: []string{}}}
	r.CUDA.Library = os.Getenv("KVFERRY_CUDA_LIB")
	if r.CUDA.Library == "" {
		r.CUDA.Library = cuda.DefaultLibrary
	}
	if d, err := cuda.Load(r.CUDA.Library); err != nil {
		r.CUDA.Error = err.Error()
	} else {
		r.CUDA.Version = d.Version()
		for i := range d.DeviceCount() {
			info, err := d.Device(i)
			if err != nil {
				r.CUDA.Error = fmt.Sprintf("device %d: %v", i, err)
				break
			}
			r.CUDA.Devices = append(r.CUDA.Devices, info)
		}
		r.CUDA.Available = len(r.CUDA.Devices) > 0 && r.CUDA.Error == ""
		if d.DeviceCount() == 0 {
			r.CUDA.Error = "the driver reports no device"
		}
	}
	class := rdma.RdmamapClass{}
	r.RDMA.Sysfs = append(r.RDMA.Sysfs, class.Devices()...)
	r.RDMA.Library = os.Getenv("KVFERRY_IBVERBS_LIB")
	if r.RDMA.Library == "" {
		r.RDMA.Library = ibv.DefaultLibrary
	}
	if err := ibv.Load(r.RDMA.Library); err != nil {
		r.RDMA.Error = err.Error()
	} else if names, err := ibv.DeviceNames(); err != nil {
		r.RDMA.Error = err.Error()
	} else {
		r.RDMA.Verbs = append(r.RDMA.Verbs, names...)
	}
	if len(r.RDMA.Sysfs) > 0 {
		r.RDMA.NICs = rdma.Inventory(class, os.DirFS("/sys"))
	}
	r.RDMA.Available = len(r.RDMA.Sysfs) > 0 && len(r.RDMA.Verbs) > 0
	if !r.RDMA.Available {
		var why []string
		if len(r.RDMA.Sysfs) == 0 {
			why = append(why, "no RDMA device in /sys/class/infiniband")
		}
		switch {
		case r.RDMA.Error != "":
			why = append(why, r.RDMA.Error)
		case len(r.RDMA.Verbs) == 0:
			why = append(why, r.RDMA.Library+" lists no device")
		}
		r.RDMA.Error = strings.Join(why, "; ")
	}
	return r
}

// cmdHW prints what probeHW finds.
func cmdHW(_ context.Context, o *options, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("hw takes no arguments")
	}
	r := probeHW()
	if o.json {
		return o.emit(r, nil, nil)
	}
	if r.CUDA.Available {
		fmt.Fprintf(o.out, "cuda: %s, driver version %d, %d device(s)\n", r.CUDA.Library, r.CUDA.Version, len(r.CUDA.Devices))
		for _, d := range r.CUDA.Devices {
			fmt.Fprintf(o.out, "  %d %s pci %s %s sm_%d vmm %v posix_fd %v fabric %v gpudirect_rdma %v dmabuf %v\n", d.Ordinal, d.Name,
				d.PCIBusID, bytesName(float64(d.TotalMem)), d.ComputeCapability, d.VMM, d.PosixFD, d.Fabric, d.GPUDirectRDMA, d.DmaBuf)
		}
	} else {
		fmt.Fprintf(o.out, "cuda: not available (%s: %s)\n", r.CUDA.Library, r.CUDA.Error)
	}
	if r.RDMA.Available {
		fmt.Fprintf(o.out, "rdma: sysfs %v, %s lists %v\n", r.RDMA.Sysfs, r.RDMA.Library, r.RDMA.Verbs)
		for _, n := range r.RDMA.NICs {
			fmt.Fprintf(o.out, "  %s pci %s numa %d netdevs %s\n", n.Device, orDash(n.PCI), n.NUMA, orDash(strings.Join(n.Netdevs, ",")))
		}
	} else {
		fmt.Fprintf(o.out, "rdma: not available (%s; sysfs %v, verbs %v)\n", r.RDMA.Error, r.RDMA.Sysfs, r.RDMA.Verbs)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
