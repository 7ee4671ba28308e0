/* cond.pml with every waiter a thread (kernel node): signals and broadcasts that take only
 * kernel nodes, the timed wait in the kernel, bit collisions between all three. */
#define KERNEL_WAITERS 7
#include "cond.pml"
