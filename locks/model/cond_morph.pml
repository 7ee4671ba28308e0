/* cond_kernel.pml without the final destroy, whose wake-up of every kernel waiter would rescue
 * a waiter that a morphed broadcast left asleep: each waiter must be passed on by the previous
 * one's unlock (or withdrawal), or it sleeps for ever (invalid end state). */
#define KERNEL_WAITERS 7
#define NO_DESTROY
#include "cond.pml"
