/* SPDX-License-Identifier: MIT */
/* The hint page layout matches struct kvm_steal_time byte for byte. */
#include <pvrt/pvhint_abi.h>

#include <stdio.h>
#include <string.h>

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);      \
			return 1;                                                                  \
		}                                                                                  \
	} while (0)

int main(void)
{
	/* The static asserts in the header already hold at compile time; check the bytes too. */
	unsigned char buf[PVHINT_RECORD_SIZE];
	struct pvhint_record r;

	memset(&r, 0, sizeof(r));
	r.steal = 0x0102030405060708ull;
	r.version = 0x11121314u;
	r.flags = 0x21222324u;
	r.preempted = 0x31;
	r.is_idle = 0x41;
	memcpy(buf, &r, sizeof(buf));
	CHECK(buf[0] == 0x08 && buf[7] == 0x01);   /* steal: u64 little endian at 0 */
	CHECK(buf[8] == 0x14 && buf[11] == 0x11);  /* version at 8 */
	CHECK(buf[12] == 0x24 && buf[15] == 0x21); /* flags at 12 */
	CHECK(buf[16] == 0x31);			   /* preempted at 16 */
	CHECK(buf[17] == 0x41);			   /* is_idle at 17: first u8_pad */
	for (unsigned i = 18; i < PVHINT_RECORD_SIZE; i++)
		CHECK(buf[i] == 0);
	CHECK(sizeof(struct pvhint_header) <= PVHINT_HEADER_SIZE);
	CHECK(memcmp("PVHT", &(unsigned){PVHINT_MAGIC}, 4) == 0);
	printf("abi layout ok\n");
	return 0;
}
