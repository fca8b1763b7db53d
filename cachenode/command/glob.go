package command

// globMatch reports whether s matches the Redis glob pattern p: '*', '?',
// '[abc]', '[^a]', '[a-z]' and '\' escapes. It backtracks only to the last
// '*', so it runs in O(len(p)*len(s)) even on adversarial patterns.
func globMatch(p, s []byte) bool {
	pi, si := 0, 0
	starP, starS := -1, 0
	for si < len(s) {
		if pi < len(p) {
			switch p[pi] {
			case '*':
				for pi < len(p) && p[pi] == '*' {
					pi++
				}
				if pi == len(p) {
					return true
				}
				starP, starS = pi, si
				continue
			case '?':
				pi++
				si++
				continue
			case '[':
				if ok, next := matchClass(p, pi, s[si]); ok {
					pi, si = next, si+1
					continue
				}
			case '\\':
				if pi+1 < len(p) && p[pi+1] == s[si] {
					pi, si = pi+2, si+1
					continue
				}
				if pi+1 == len(p) && s[si] == '\\' {
					pi, si = pi+1, si+1
					continue
				}
			default:
				if p[pi] == s[si] {
					pi++
					si++
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		starS++
		pi, si = starP, starS
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// matchClass matches c against the class starting at p[i] == '['. It
// returns whether it matched and the index after the class. An unterminated
// class runs to the end of the pattern, as in Redis.
func matchClass(p []byte, i int, c byte) (bool, int) {
	i++
	neg := false
	if i < len(p) && p[i] == '^' {
		neg = true
		i++
	}
	match := false
	for i < len(p) && p[i] != ']' {
		switch {
		case p[i] == '\\' && i+1 < len(p):
			i++
			if p[i] == c {
				match = true
			}
			i++
		case i+2 < len(p) && p[i+1] == '-' && p[i+2] != ']':
			lo, hi := p[i], p[i+2]
			if lo > hi {
				lo, hi = hi, lo
			}
			if c >= lo && c <= hi {
				match = true
			}
			i += 3
		default:
			if p[i] == c {
				match = true
			}
			i++
		}
	}
	if i < len(p) {
		i++ // the ']'
	}
	return match != neg, i
}
