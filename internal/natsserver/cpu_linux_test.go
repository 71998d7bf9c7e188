package natsserver_test

import "syscall"

type rusage struct{ syscall.Rusage }

func getrusage(r *rusage) error { return syscall.Getrusage(syscall.RUSAGE_SELF, &r.Rusage) }

func (r *rusage) ns() int64 { return r.Utime.Nano() + r.Stime.Nano() }
