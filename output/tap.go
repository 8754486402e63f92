package output

import (
	"context"
	"io"
)

type tapKey struct{}

// WithTap returns a context carrying w as the Tap of the captures made for
// the command run with it (see Options.Tap): how a caller several layers
// up (berth's daemon) streams a command's output as it comes.
func WithTap(ctx context.Context, w io.Writer) context.Context {
	return context.WithValue(ctx, tapKey{}, w)
}

// TapFrom returns the Tap set on ctx by WithTap, nil if none.
func TapFrom(ctx context.Context) io.Writer {
	w, _ := ctx.Value(tapKey{}).(io.Writer)
	return w
}

// tapStage copies what reaches the stage it wraps to w.
type tapStage struct {
	stage
	w io.Writer
}

func (t *tapStage) Write(p []byte, next func([]byte)) {
	if t.w != nil {
		_, _ = t.w.Write(p)
	}
	t.stage.Write(p, next)
}

// clone copies the state without the tap: a clone only looks ahead.
func (t *tapStage) clone() stage { return &tapStage{stage: t.stage.clone()} }
