/*
 * test_procfd.c - unit tests for fs/procfd.c, on this process's own /proc: the thread group of
 * a thread, the descriptors of a file a process holds open for writing (a dup counts, a reader
 * does not, another inode under the same name does not), and those of its children.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fs_i.h"

static void *thread_tgid(void *arg)
{
	*(pid_t *)arg = fs_proc_tgid((pid_t)syscall(SYS_gettid));
	return NULL;
}

static void test_tgid(void **state)
{
	pthread_t t;
	pid_t got = 0;

	(void)state;
	assert_int_equal(fs_proc_tgid(getpid()), getpid());
	assert_int_equal(pthread_create(&t, NULL, thread_tgid, &got), 0);
	pthread_join(t, NULL);
	assert_int_equal(got, getpid());	   /* a thread's id names its process */
	assert_int_equal(fs_proc_tgid(0), -ESRCH); /* outside our pid namespace */
	assert_true(fs_proc_tgid(-1) < 0);
}

/* A new file under a temporary directory: its directory and name into @dir, @name. */
static uint64_t tmpfile_ino(char *dir, const char *name, char *path)
{
	struct stat st;
	int fd;

	assert_non_null(mkdtemp(dir));
	sprintf(path, "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	close(fd);
	return st.st_ino;
}

static void test_holds(void **state)
{
	char dir[] = "/tmp/procfd-XXXXXX", path[64];
	uint64_t ino = tmpfile_ino(dir, "seg.log", path);
	int fd, dup_fd, rd;

	(void)state;
	assert_int_equal(fs_proc_holds(getpid(), ino, "seg.log"), 0);
	fd = open(path, O_WRONLY);
	assert_int_equal(fs_proc_holds(getpid(), ino, "seg.log"), 1);
	assert_int_equal(fs_proc_holds(getpid(), ino + 1, "seg.log"), 0); /* another inode */
	assert_int_equal(fs_proc_holds(getpid(), ino, "g.log"), 0);	  /* not a whole name */
	assert_int_equal(fs_proc_holds(getpid(), ino, "log"), 0);
	dup_fd = dup(fd);
	close(fd);
	assert_int_equal(fs_proc_holds(getpid(), ino, "seg.log"), 1); /* the dup */
	close(dup_fd);
	rd = open(path, O_RDONLY);
	assert_int_equal(fs_proc_holds(getpid(), ino, "seg.log"), 0); /* a reader */
	close(rd);
	assert_int_equal(fs_proc_holds(0, ino, "seg.log"), -ESRCH);
	unlink(path);
	rmdir(dir);
}

/* A process whose descriptor table grew past FS_PROC_SCAN_MAX once (FDSize never shrinks) but
 * holds few descriptors now is read: the test harness's own process, after a thousand sockets,
 * made a Popen child's output commit at the parent's close when FDSize was the rule. */
static void test_big_table_few_open(void **state)
{
	struct rlimit rl = {FS_PROC_SCAN_MAX + 200, FS_PROC_SCAN_MAX + 200}, old;
	char dir[] = "/tmp/procfd-XXXXXX", path[64];
	uint64_t ino = tmpfile_ino(dir, "big", path);
	int high, fd;

	(void)state;
	getrlimit(RLIMIT_NOFILE, &old);
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		skip();
	high = fcntl(0, F_DUPFD, FS_PROC_SCAN_MAX + 100); /* the table grows past the cap */
	assert_true(high >= 0);
	close(high);
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(fs_proc_holds(getpid(), ino, "big"), 1);
	close(fd);
	assert_int_equal(fs_proc_holds(getpid(), ino, "big"), 0);
	setrlimit(RLIMIT_NOFILE, &old);
	unlink(path);
	rmdir(dir);
}

/* A process with more than FS_PROC_SCAN_MAX descriptors open is not read past them. */
static void test_too_many(void **state)
{
	struct rlimit rl = {FS_PROC_SCAN_MAX + 200, FS_PROC_SCAN_MAX + 200}, old;
	int fds[FS_PROC_SCAN_MAX + 1], n;

	(void)state;
	getrlimit(RLIMIT_NOFILE, &old);
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		skip();
	for (n = 0; n < FS_PROC_SCAN_MAX + 1; n++)
		assert_true((fds[n] = open("/dev/null", O_RDONLY)) >= 0);
	assert_int_equal(fs_proc_holds(getpid(), 1, "x"), -E2BIG);
	while (n--)
		close(fds[n]);
	setrlimit(RLIMIT_NOFILE, &old);
}

static void test_children_hold(void **state)
{
	char dir[] = "/tmp/procfd-XXXXXX", path[64], c;
	uint64_t ino = tmpfile_ino(dir, "out", path);
	int fd = open(path, O_WRONLY), go[2], ready[2], status;
	pid_t pid;

	(void)state;
	assert_int_equal(pipe(go), 0);
	assert_int_equal(pipe(ready), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(go[1]);
		if (write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) < 0)
			_exit(1);
		_exit(0); /* holds fd until here */
	}
	close(go[0]);
	close(ready[1]);
	assert_int_equal(read(ready[0], &c, 1), 1);
	close(fd);
	assert_int_equal(fs_proc_holds(getpid(), ino, "out"), 0);
	assert_int_equal(fs_proc_children_hold(getpid(), ino, "out"), 1);
	close(go[1]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(fs_proc_children_hold(getpid(), ino, "out"), 0);
	close(ready[0]);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tgid),
	    cmocka_unit_test(test_holds),
	    cmocka_unit_test(test_children_hold),
	    cmocka_unit_test(test_big_table_few_open),
	    cmocka_unit_test(test_too_many),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
