/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * The few kernel types the program reads, declared by hand for CO-RE instead of a vmlinux.h
 * generated from the build machine's kernel: preserve_access_index makes every field access a
 * relocation that libbpf resolves against the running kernel's BTF at load time, so the object
 * does not depend on the kernel it was built on. Only the fields used are declared.
 */
#ifndef PVHINT_SCHED_MIN_H
#define PVHINT_SCHED_MIN_H

struct thread_info {
	unsigned int cpu; /* task_cpu() with CONFIG_THREAD_INFO_IN_TASK (x86-64, arm64), 5.16+ */
} __attribute__((preserve_access_index));

/* The vCPU mode's way to a CPU's per-CPU area: a task's cfs_rq -> its rq (CONFIG_FAIR_GROUP_SCHED),
 * i.e. &per_cpu(runqueues, cpu). */
struct rq {
	int cpu;
	unsigned long long clock; /* rq_clock(): updated by __schedule() before it picks */
} __attribute__((preserve_access_index));

struct cfs_rq {
	struct rq *rq;
} __attribute__((preserve_access_index));

struct sched_entity {
	struct cfs_rq *cfs_rq;
} __attribute__((preserve_access_index));

/* KVM's per-CPU record, written by the host (arch/x86/include/uapi/asm/kvm_para.h). */
struct kvm_steal_time {
	unsigned long long steal;
	unsigned int version;
	unsigned int flags;
	unsigned char preempted;
};

/* CONFIG_SCHED_INFO (Debian: yes): the run-queue wait the kernel keeps per task, what
 * /proc/<tid>/schedstat shows. */
struct sched_info {
	unsigned long long run_delay;	/* waited on a run queue, ns, summed */
	unsigned long long last_queued; /* when the current wait began (rq clock); 0: not waiting */
} __attribute__((preserve_access_index));

struct task_struct {
	struct thread_info thread_info;
	struct sched_info sched_info;
	struct sched_entity se;
	unsigned int __state; /* 5.14+ (was 'state'); TASK_RUNNING == 0 */
	int pid;	      /* the kernel's thread id */
	int tgid;
} __attribute__((preserve_access_index));

/* Before 5.16, task_cpu() was task_struct.cpu (a CO-RE flavour: matched as task_struct). */
struct task_struct___old {
	unsigned int cpu;
} __attribute__((preserve_access_index));

#endif /* PVHINT_SCHED_MIN_H */
