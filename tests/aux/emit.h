/* The byte stream tests/aux/emit writes, so a reader can check every byte and its
 * position (a lost, doubled or reordered 64 KiB chunk changes the bytes). */
#pragma once

#include <stdint.h>

static inline uint8_t emit_byte(uint64_t off)
{
	return (uint8_t)(off ^ (off >> 8) ^ (off >> 16) ^ (off >> 24));
}
