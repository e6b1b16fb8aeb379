// Package twodocs says so again.
package twodocs
