package script

import "errors"

var (
	// ErrCompile: a script does not compile; the error is a *CompileError.
	ErrCompile = errors.New("script: does not compile")
	// ErrKilled is the cause to cancel Run's context with for SCRIPT KILL:
	// the script's reply then says so as Redis does.
	ErrKilled = errors.New("script: killed by SCRIPT KILL")
)

// CompileError says where a script does not compile.
type CompileError struct {
	// Msg is Lua's message, "user_script:<line>: <what> near '<token>'".
	Msg string
}

func (e *CompileError) Error() string { return ErrCompile.Error() + ": " + e.Msg }

// Is makes errors.Is(err, ErrCompile) hold.
func (e *CompileError) Is(target error) bool { return target == ErrCompile }
