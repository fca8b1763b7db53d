package keyspace

// Slot returns the Redis Cluster hash slot of key (CRC16/XMODEM of the key
// or of its {hash tag}, mod 16384). Shards are chosen by slot so that a
// slot-owning cluster node can later enumerate and migrate by slot, and so
// that keys sharing a hash tag share a shard.
func Slot(key []byte) int {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j > i+1 {
						key = key[i+1 : j]
					}
					goto done
				}
			}
			break
		}
	}
done:
	return int(crc16(key)) & (NumSlots - 1)
}

// NumSlots is the number of Redis Cluster hash slots.
const NumSlots = 16384

var crcTable = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^c]
	}
	return crc
}
