/* barrier.pml with more processes than COUNT arriving twice: a process that has left arrives
 * again while waiters of the overlapping round still sleep. The harness itself can leave one
 * process alone in a round (the others finished): the Monitor allows sleepers of the current
 * round, never of an ended one. */
#define N 3
#define COUNT 2
#define ITER 2
#define DRAINS 0
#include "barrier.pml"
