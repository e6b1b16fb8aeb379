package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/session"
	"github.com/airlock-sandbox/airlock/app/settings"
)

// ErrBadImage marks a refused image choice (an unknown name, a disk kept
// without the standard image).
var ErrBadImage = errors.New("invalid image choice")

// image returns the verified image name: cfg.Image for the minimal one,
// cfg.FindImage otherwise.
func (s *Service) image(name string) (sandbox.Image, error) {
	if err := sandbox.CheckImageName(name); err != nil {
		return sandbox.Image{}, fmt.Errorf("%w: %w", ErrBadImage, err)
	}
	if name == "" || name == sandbox.DefaultImage || name == s.cfg.Image.Name {
		return s.cfg.Image, nil
	}
	if s.cfg.FindImage == nil {
		return sandbox.Image{}, fmt.Errorf("service: the %s image is not available here", name)
	}
	return s.cfg.FindImage(name)
}

// diskDir is sandbox.Options.DiskDir for keepDisk.
func (s *Service) diskDir(keepDisk bool) string {
	if keepDisk {
		return s.cfg.StateDir
	}
	return ""
}

// startImage picks the image the settings name for the first boot. A
// chosen image that cannot be found falls back to the minimal one, with a
// warning, so that the app still opens and the choice can be changed.
func (s *Service) startImage(st settings.Settings) (sandbox.Image, string) {
	img, err := s.image(st.Image)
	if err != nil {
		s.log.Warn("the image in the settings is not available; booting the minimal image", "image", st.Image, "err", err)
		return s.cfg.Image, ""
	}
	return img, s.diskDir(st.KeepDisk && img.RootDisk != "")
}

// SetImage chooses the guest image and whether the standard image keeps
// its changes outside /workspace on the workspace's persistent disk. The
// settings keep the choice and a running VM restarts on it (its tasks are
// lost).
func (s *Service) SetImage(ctx context.Context, name string, keepDisk bool) error {
	img, err := s.image(name)
	if err != nil {
		return err
	}
	if keepDisk && img.RootDisk == "" {
		return fmt.Errorf("%w: only the standard image has a disk to keep", ErrBadImage)
	}
	if err := s.updateSettings(func(st *settings.Settings) error {
		st.Image, st.KeepDisk = img.Name, keepDisk
		return nil
	}); err != nil {
		return err
	}
	return s.sess.SetImage(ctx, img, s.diskDir(keepDisk))
}

// ResetDisk deletes the persistent disk of the current workspace, so the
// standard image starts from its own root disk again. A running VM is
// stopped first (its tasks are lost) and booted again afterwards.
func (s *Service) ResetDisk(ctx context.Context) error {
	st := s.sess.Status()
	running := st.State != session.StateStopped
	if running {
		if err := s.sess.Stop(ctx); err != nil {
			return err
		}
	}
	if err := sandbox.ResetDataDisk(sandbox.DataDiskPath(s.cfg.StateDir, st.Workspace)); err != nil {
		return err
	}
	if running {
		return s.sess.Start(ctx)
	}
	return nil
}
