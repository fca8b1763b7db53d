//go:build race

package launcher

const raceEnabled = true
