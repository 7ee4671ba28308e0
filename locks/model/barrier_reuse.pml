/* barrier.pml with rounds in a row: every process in every round (N = COUNT), so waiters of the
 * next round set their bits while the last round's waiters are still being woken. */
#define N 3
#define COUNT 3
#define ITER 3
#define DRAINS 1
#include "barrier.pml"
