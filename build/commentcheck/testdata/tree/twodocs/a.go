// Package twodocs says so twice.
package twodocs
