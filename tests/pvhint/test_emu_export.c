/* SPDX-License-Identifier: MIT */
/*
 * export=PATH: the emulator also publishes its page in a file, which another handle (here the
 * kvm source, as another process would) reads: it sees the emulated flags change; the file is
 * removed at close and at exit; an existing path or a symbolic link is refused; a bad path is an
 * error naming the key.
 */
#define _GNU_SOURCE
#include "check.h"

#include <pvrt/pvhint.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static pvhint_t *emu;
static int stop;

static void *spin(void *arg)
{
	(void)arg;
	CHECK(!pvhint_emu_attach(emu, 1));
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
#ifdef PVRT_TSAN
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts); /* TSan delivers signals here */
#endif
	}
	CHECK(!pvhint_emu_detach(emu));
	return NULL;
}

/* Exists, with this content? */
static bool has_content(const char *p, const char *want)
{
	char buf[64] = {0};
	int fd = open(p, O_RDONLY);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n >= 0 && !strcmp(buf, want);
}

/* issue 9, bug 2: an export never replaces or follows what is at the path, is created by us
 * with mode 0644, and disappears at exit of the process that exported, not of a forked child. */
static void hostile_paths(const char *path, const char *spec)
{
	char target[80];
	pvhint_t *e;
	snprintf(target, sizeof(target), "%s.target", path);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0666);
	CHECK(fd >= 0 && write(fd, "precious", 8) == 8);
	close(fd);
	CHECK_EQ(pvhint_open(&(struct pvhint_options){.source = "emu", .emu = spec}, &e), -EEXIST);
	CHECK(strstr(pvhint_errmsg(), "exists"));
	CHECK(has_content(path, "precious"));
	unlink(path);
	fd = open(target, O_WRONLY | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0 && write(fd, "root-only", 9) == 9);
	close(fd);
	CHECK(symlink(target, path) == 0);
	CHECK_EQ(pvhint_open(&(struct pvhint_options){.source = "emu", .emu = spec}, &e), -EEXIST);
	CHECK(has_content(target, "root-only"));
	unlink(path);
	unlink(target);

	struct stat st;
	CHECK(!pvhint_open(&(struct pvhint_options){.source = "emu", .emu = spec}, &e));
	CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0644 &&
	      st.st_uid == geteuid());
	/* A forked child's emulator is inert: its close and exit leave the parent's file. */
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		pvhint_close(e);
		exit(0);
	}
	int ws;
	CHECK(waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	CHECK(access(path, F_OK) == 0);
	pvhint_close(e);
	CHECK(access(path, F_OK) != 0 && errno == ENOENT);
	/* Removed at exit without a close (the default handle is never closed). */
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (pvhint_open(&(struct pvhint_options){.source = "emu", .emu = spec}, &e))
			_exit(3);
		exit(access(path, F_OK) == 0 ? 0 : 4);
	}
	CHECK(waitpid(pid, &ws, 0) == pid && WIFEXITED(ws));
	CHECK_EQ(WEXITSTATUS(ws), 0);
	CHECK(access(path, F_OK) != 0 && errno == ENOENT);
}

int main(void)
{
	char path[64], spec[128];
	snprintf(path, sizeof(path), "/tmp/pvhint-export-%d", (int)getpid());
	snprintf(spec, sizeof(spec), "vcpus=3,pcpus=1,mode=script,export=%s", path);
	hostile_paths(path, spec);
	CHECK(!pvhint_open(&(struct pvhint_options){.source = "emu", .emu = spec}, &emu));
	CHECK(access(path, R_OK) == 0);

	pvhint_t *rd;
	CHECK(!pvhint_open(&(struct pvhint_options){.source = "kvm", .kvm_path = path}, &rd));
	CHECK(!strcmp(pvhint_source_name(rd), "emu")); /* the page says who produced it */
	CHECK_EQ(pvhint_nr_vcpus(rd), 3);
	CHECK_EQ(pvhint_header(rd)->valid,
		 PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED | PVHINT_VALID_IS_IDLE);

	pthread_t th;
	CHECK(!pthread_create(&th, NULL, spin, NULL));
	while (pvhint_pcpu_idle(rd, 1)) /* vCPU 1 runs on pCPU 0: not idle once attached */
		test_sleep_us(100);
	CHECK(!pvhint_vcpu_preempted(rd, 1));
	CHECK(!pvhint_emu_deschedule(emu, 1, 0));
	CHECK(pvhint_vcpu_preempted(rd, 1));
	CHECK(pvhint_pcpu_idle(rd, 0)); /* nothing runs on pCPU 0 now */
	test_sleep_us(5000);
	CHECK(!pvhint_emu_resume(emu, 1));
	CHECK(!pvhint_vcpu_preempted(rd, 1));
	CHECK(pvhint_steal(rd, 1) >= 5000000);
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	CHECK(!pthread_join(th, NULL));
	pvhint_close(rd);
	pvhint_close(emu);
	CHECK(access(path, F_OK) != 0 && errno == ENOENT);

	CHECK_EQ(
	    pvhint_open(&(struct pvhint_options){.source = "emu", .emu = "export=relative"}, &emu),
	    -EINVAL);
	CHECK(strstr(pvhint_errmsg(), "'export'"));
	CHECK_EQ(pvhint_open(
		     &(struct pvhint_options){.source = "emu", .emu = "export=/nonexistent/dir/x"},
		     &emu),
		 -ENOENT);
	CHECK(strstr(pvhint_errmsg(), "export"));
	printf("emu export ok\n");
	return 0;
}
