/* SPDX-License-Identifier: MIT */
/* Built when Boost.Fiber is missing: no peer benchmarks. */
void boost_fiber_register(void);
void boost_fiber_register(void)
{
}
