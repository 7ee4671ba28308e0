/* A program built against an installed pvrt: opens the hint source named by the environment. */
#include <pvrt/pvhint.h>
#include <stdio.h>

int main(void)
{
	pvhint_t *h;
	int r = pvhint_open(NULL, &h);

	if (r) {
		fprintf(stderr, "pvhint_open: %s\n", pvhint_errmsg());
		return 1;
	}
	printf("source %u, %u vCPUs\n", pvhint_header(h)->source, pvhint_nr_vcpus(h));
	pvhint_close(h);
	return 0;
}
