package hip

// SetAccessAll grants every device of the runtime read-write access to the
// VMM mapping [p, p+size) (one hipMemSetAccess call with a descriptor per
// device), as memory that same-host peers and every local device may touch
// must be.
func (r *Runtime) SetAccessAll(p, size uint64) error {
	if err := r.needVMM("hipMemSetAccess"); err != nil {
		return err
	}
	if err := r.checkDevice(0); err != nil {
		return err
	}
	descs := make([]accessDesc, r.ndev)
	for i := range descs {
		descs[i] = accessDesc{locType: locTypeDevice, locID: int32(i), flags: accessReadWrite}
	}
	return r.check("hipMemSetAccess", r.f.memSetAccess(p, size, &descs[0], uint64(len(descs))))
}
