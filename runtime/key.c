/* SPDX-License-Identifier: MIT */
/*
 * ULT-local keys. A key is (generation << 8 | slot); a slot's 'state' is the generation of the
 * key living in it, 0 when free, so a deleted key's values are never returned for a new key in
 * the same slot: each value also remembers the generation it was set under.
 */
#include "internal.h"

#include <errno.h>
#include <pthread.h>

struct rt_keyvals {
	struct {
		void *v;
		uint32_t gen;
	} s[PVRT_KEYS_MAX];
};

static struct {
	uint32_t state; /* generation when in use, 0 when free; atomic */
	uint32_t lastgen;
	void (*dtor)(void *);
} keys[PVRT_KEYS_MAX];
static struct rt_lock keys_lock;

int pvrt_key_create(pvrt_key_t *key, void (*destructor)(void *))
{
	PVRT_RT_SCOPE();
	if (!key)
		return rt_fail(-EINVAL, "pvrt_key_create: key is NULL");
	rt_lock_acquire(&keys_lock);
	for (unsigned i = 0; i < PVRT_KEYS_MAX; i++) {
		if (keys[i].state)
			continue;
		uint32_t g = (keys[i].lastgen + 1) & 0xffffff;
		if (!g)
			g = 1;
		keys[i].lastgen = g;
		__atomic_store_n(&keys[i].dtor, destructor, __ATOMIC_RELAXED);
		/* Release: readers that see the generation see the destructor. */
		__atomic_store_n(&keys[i].state, g, __ATOMIC_RELEASE);
		rt_lock_release(&keys_lock);
		*key = g << 8 | i;
		return 0;
	}
	rt_lock_release(&keys_lock);
	return rt_fail(-EAGAIN, "pvrt_key_create: PVRT_KEYS_MAX keys exist");
}

static bool key_live(pvrt_key_t key)
{
	unsigned i = key & 0xff;
	return i < PVRT_KEYS_MAX && key >> 8 &&
	       __atomic_load_n(&keys[i].state, __ATOMIC_ACQUIRE) == key >> 8;
}

int pvrt_key_delete(pvrt_key_t key)
{
	PVRT_RT_SCOPE();
	rt_lock_acquire(&keys_lock);
	if (!key_live(key)) {
		rt_lock_release(&keys_lock);
		return rt_fail(-EINVAL, "pvrt_key_delete: no such key");
	}
	__atomic_store_n(&keys[key & 0xff].state, 0, __ATOMIC_RELEASE);
	rt_lock_release(&keys_lock);
	return 0;
}

/* Values of threads that are not ULTs, destroyed at thread exit through a pthread key. */
static __thread struct rt_keyvals *thread_kv;
static pthread_key_t thread_kv_key;
static pthread_once_t thread_kv_once = PTHREAD_ONCE_INIT;

static void thread_kv_exit(void *p)
{
	struct rt_keyvals *kv = p;
	rt_keys_run_destructors(&kv);
	thread_kv = NULL;
}

static void thread_kv_init(void)
{
	pthread_key_create(&thread_kv_key, thread_kv_exit);
}

static struct rt_keyvals **current_kv(void)
{
	struct pvrt_ult *u = rt_ult_current();
	return u ? &u->keys : &thread_kv;
}

int pvrt_key_set(pvrt_key_t key, const void *value)
{
	if (!key_live(key))
		return rt_fail(-EINVAL, "pvrt_key_set: no such key");
	struct rt_keyvals **kvp = current_kv();
	if (!*kvp) {
		struct rt_keyvals *kv = rt_alloc(sizeof(*kv));
		if (!kv)
			return rt_fail(-ENOMEM, "pvrt_key_set: out of memory");
		if (kvp == &thread_kv) {
			pthread_once(&thread_kv_once, thread_kv_init);
			pthread_setspecific(thread_kv_key, kv);
		}
		*kvp = kv;
	}
	(*kvp)->s[key & 0xff].v = (void *)value;
	(*kvp)->s[key & 0xff].gen = key >> 8;
	return 0;
}

void *pvrt_key_get(pvrt_key_t key)
{
	if (!key_live(key))
		return NULL;
	struct rt_keyvals *kv = *current_kv();
	if (!kv || kv->s[key & 0xff].gen != key >> 8)
		return NULL;
	return kv->s[key & 0xff].v;
}

void rt_keys_run_destructors(struct rt_keyvals **kvp)
{
	struct rt_keyvals *kv = *kvp;
	for (int round = 0; kv && round < PVRT_KEY_DESTRUCTOR_ITERATIONS; round++) {
		bool any = false;
		for (unsigned i = 0; i < PVRT_KEYS_MAX; i++) {
			void *v = kv->s[i].v;
			if (!v)
				continue;
			kv->s[i].v = NULL;
			if (__atomic_load_n(&keys[i].state, __ATOMIC_ACQUIRE) != kv->s[i].gen)
				continue;
			void (*d)(void *) = __atomic_load_n(&keys[i].dtor, __ATOMIC_RELAXED);
			if (d) {
				d(v);
				any = true;
			}
		}
		if (!any)
			break;
	}
	*kvp = NULL;
	rt_free(kv, sizeof(*kv));
}
